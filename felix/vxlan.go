package felix

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// vxlanDev manages one family's VXLAN device and everything on it:
// vxlan.routed (local address the node's IPv4 address, MTU host-50, its
// /32) or vxlan-v6.routed (the node's IPv6 address, MTU host-70, its
// /128), each with VNI, port, MAC and up, and for each remote VTEP a
// permanent ARP or NDP entry (VTEP address -> MAC) and a permanent FDB
// entry (MAC -> node address). The device is routed's alone (its name
// says so), so every permanent entry on it that is not wanted is stale
// and removed; entries the kernel creates itself are left alone. Each
// reconcile re-reads the kernel: the lists are one entry per node.
type vxlanDev struct {
	h   *netlink.Handle
	log *logrus.Entry
	fam vxlanFamily
	// refused are the refused VXLAN tunnel address claims last logged
	// (vxlanPlan.refused).
	refused map[string]string
}

// logRefused says once, per node and address, that a VXLAN tunnel
// address a Node claims is ignored because IPAM does not hold it for the
// node (remoteVTEPs), and when that ends.
func (v *vxlanDev) logRefused(now map[string]string) {
	for key, why := range now {
		if v.refused[key] != why {
			v.log.WithFields(logrus.Fields{"node": refusedNode(key), "device": v.fam.device}).Warn("no VTEP for the node: ignoring a tunnel address its record claims: " + why)
		}
	}
	for key := range v.refused {
		if _, still := now[key]; !still {
			v.log.WithFields(logrus.Fields{"node": refusedNode(key), "device": v.fam.device}).Info("VXLAN tunnel address no longer refused (IPAM holds it for the node, the node no longer claims it, or VXLAN is off): " + key)
		}
	}
	v.refused = maps.Clone(now)
}

// vxlanWant is the device felix wants; a zero value means none.
type vxlanWant struct {
	on       bool
	local    netip.Addr // node address: source of encapsulated packets
	addr     netip.Addr // the device's own address
	mac      net.HardwareAddr
	mtu      int
	tunnelTo map[netip.Addr]vtep
	// vni and port are the device's (FelixConfiguration's vxlanVNI and
	// vxlanPort; VXLANVNI and VXLANPort by default).
	vni, port int
}

// reconcile brings the device in line with want and returns it if it
// exists afterwards.
func (v *vxlanDev) reconcile(want vxlanWant) (netlink.Link, error) {
	name := v.fam.device
	link, err := v.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &notFound) {
		return nil, fmt.Errorf("felix: looking up %s: %w", name, err)
	}
	if !want.on {
		if link != nil {
			if err := v.h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
				return link, fmt.Errorf("felix: removing %s: %w", name, err)
			}
			v.log.Info("removed " + name + ": no VXLAN pool of its family selects this node")
		}
		return nil, nil
	}
	if link != nil && !v.matches(link, want) {
		// VNI, port and local address cannot change in place.
		if err := v.h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return link, fmt.Errorf("felix: replacing %s: %w", name, err)
		}
		v.log.Info("recreating " + name + ": its VNI, port or local address changed")
		link = nil
	}
	if link == nil {
		dev := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: name, MTU: want.mtu, HardwareAddr: want.mac},
			VxlanId:   want.vni, Port: want.port, SrcAddr: want.local.AsSlice(), Learning: false,
		}
		addErr := v.h.LinkAdd(dev)
		if addErr != nil && !errors.Is(addErr, unix.EEXIST) {
			return nil, fmt.Errorf("felix: creating %s (VNI %d, port %d): %w", name, want.vni, want.port, addErr)
		}
		if link, err = v.h.LinkByName(name); err != nil {
			if other := v.holderOfVNI(want); addErr != nil && other != "" {
				// EEXIST without our device: the kernel allows one VXLAN
				// device per VNI, port and family (Calico's vxlan.calico
				// or vxlan-v6.calico, left on a node moved from Calico).
				return nil, fmt.Errorf("felix: creating %s: %s already uses VNI %d on port %d; delete it (ip link del %s): %w",
					name, other, want.vni, want.port, other, addErr)
			}
			return nil, fmt.Errorf("felix: %s after creating it: %w", name, err)
		}
		v.log.WithFields(logrus.Fields{"vni": want.vni, "port": want.port, "local": want.local, "mac": want.mac.String()}).Info("created " + name)
	}
	a := link.Attrs()
	if a.MTU != want.mtu {
		if err := v.h.LinkSetMTU(link, want.mtu); err != nil {
			return link, fmt.Errorf("felix: setting %s MTU %d: %w", name, want.mtu, err)
		}
	}
	if !bytes.Equal(a.HardwareAddr, want.mac) {
		if err := v.h.LinkSetHardwareAddr(link, want.mac); err != nil {
			return link, fmt.Errorf("felix: setting %s MAC %s: %w", name, want.mac, err)
		}
	}
	if a.Flags&net.FlagUp == 0 {
		if err := v.h.LinkSetUp(link); err != nil {
			return link, fmt.Errorf("felix: bringing %s up: %w", name, err)
		}
	}
	if err := setHostAddr(v.h, v.log, link, want.addr, v.fam.v6); err != nil {
		return link, err
	}
	if l, err := v.h.LinkByName(name); err == nil {
		link = l
	}
	return link, errors.Join(v.syncNeighbours(link, want.tunnelTo), v.syncFDB(link, want.tunnelTo))
}

// holderOfVNI names another VXLAN device of this family using the VNI
// and port wanted, "" if none.
func (v *vxlanDev) holderOfVNI(want vxlanWant) string {
	links, err := v.h.LinkList()
	if err != nil {
		return ""
	}
	for _, l := range links {
		x, ok := l.(*netlink.Vxlan)
		if !ok || x.Name == v.fam.device || x.VxlanId != want.vni || x.Port != want.port {
			continue
		}
		// The kernel keys the VNI on the family of the local (or group)
		// address too: a device of the other family is no obstacle.
		ip := x.SrcAddr
		if len(ip) == 0 {
			ip = x.Group
		}
		if (len(ip) > 0 && ip.To4() == nil) == v.fam.v6 {
			return x.Name
		}
	}
	return ""
}

func (v *vxlanDev) matches(link netlink.Link, want vxlanWant) bool {
	x, ok := link.(*netlink.Vxlan)
	if !ok {
		return false
	}
	src, _ := netip.AddrFromSlice(x.SrcAddr)
	return x.VxlanId == want.vni && x.Port == want.port && src.Unmap() == want.local && !x.Learning
}

// syncNeighbours leaves exactly one permanent ARP (IPv6: NDP) entry per
// VTEP.
func (v *vxlanDev) syncNeighbours(link netlink.Link, vteps map[netip.Addr]vtep) error {
	want := map[netip.Addr]net.HardwareAddr{}
	for _, t := range vteps {
		want[t.addr] = t.mac
	}
	family, what := netlink.FAMILY_V4, "ARP"
	if v.fam.v6 {
		family, what = netlink.FAMILY_V6, "NDP"
	}
	return v.syncEntries(link, family, what, want, func(t netip.Addr, mac net.HardwareAddr) *netlink.Neigh {
		return &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: family, State: netlink.NUD_PERMANENT,
			IP: t.AsSlice(), HardwareAddr: mac}
	})
}

// syncFDB leaves exactly one permanent FDB entry per VTEP MAC, pointing
// at its node.
func (v *vxlanDev) syncFDB(link netlink.Link, vteps map[netip.Addr]vtep) error {
	want := map[netip.Addr]net.HardwareAddr{}
	for _, t := range vteps {
		want[t.nodeAddr] = t.mac
	}
	return v.syncEntries(link, unix.AF_BRIDGE, "FDB", want, func(node netip.Addr, mac net.HardwareAddr) *netlink.Neigh {
		return &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_BRIDGE, State: netlink.NUD_PERMANENT,
			Flags: netlink.NTF_SELF, IP: node.AsSlice(), HardwareAddr: mac}
	})
}

// syncEntries reconciles one neighbour family on link against want
// (IP -> MAC; for the FDB the IP is the destination node).
func (v *vxlanDev) syncEntries(link netlink.Link, family int, what string, want map[netip.Addr]net.HardwareAddr,
	entry func(netip.Addr, net.HardwareAddr) *netlink.Neigh) error {
	have, err := v.h.NeighList(link.Attrs().Index, family)
	if err != nil {
		return fmt.Errorf("felix: listing %s %s entries: %w", v.fam.device, what, err)
	}
	var errs []error
	ok := map[netip.Addr]bool{}
	for _, n := range have {
		if n.LinkIndex != link.Attrs().Index || n.State&netlink.NUD_PERMANENT == 0 {
			continue // the kernel's own (or another device's on the bridge list)
		}
		ip, _ := netip.AddrFromSlice(n.IP)
		ip = ip.Unmap()
		if mac, wanted := want[ip]; wanted && bytes.Equal(mac, n.HardwareAddr) && !ok[ip] {
			ok[ip] = true
			continue
		}
		if err := v.h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("felix: removing stale %s entry %s %s: %w", what, ip, n.HardwareAddr, err))
			continue
		}
		v.log.WithFields(logrus.Fields{"ip": ip, "mac": n.HardwareAddr.String()}).Info("removed stale " + v.fam.device + " " + what + " entry")
	}
	for ip, mac := range want {
		if ok[ip] {
			continue
		}
		if err := v.h.NeighSet(entry(ip, mac)); err != nil {
			errs = append(errs, fmt.Errorf("felix: adding %s entry %s %s: %w", what, ip, mac, err))
			continue
		}
		v.log.WithFields(logrus.Fields{"ip": ip, "mac": mac.String()}).Debug("set " + v.fam.device + " " + what + " entry")
	}
	return errors.Join(errs...)
}

// vxlanChanged reports whether a VXLAN device or its entries must be
// reconciled between two plans.
func vxlanChanged(old, cur *plan) bool {
	if old.nodeAddr != cur.nodeAddr || old.nodeAddr6 != cur.nodeAddr6 {
		return true
	}
	for _, pair := range [][2]*vxlanPlan{{&old.vxlan, &cur.vxlan}, {&old.vxlan6, &cur.vxlan6}} {
		o, c := pair[0], pair[1]
		if o.on != c.on || o.addr != c.addr || o.mac != c.mac || len(o.vteps) != len(c.vteps) || !maps.Equal(o.refused, c.refused) {
			return true
		}
		for k, v := range c.vteps {
			ov, ok := o.vteps[k]
			if !ok || ov.addr != v.addr || !bytes.Equal(ov.mac, v.mac) {
				return true
			}
		}
	}
	return false
}

// applyVXLAN reconciles both VXLAN devices and tells the route table
// about them.
func (l *loop) applyVXLAN() error {
	p := l.plan
	var errs []error
	for _, d := range []struct {
		dev   *vxlanDev
		plan  vxlanPlan
		local netip.Prefix
		mac   func(string) net.HardwareAddr
	}{
		{l.vx, p.vxlan, p.nodeAddr, VXLANMAC},
		{l.vx6, p.vxlan6, p.nodeAddr6, VXLANMACV6},
	} {
		want := vxlanWant{on: d.plan.on && d.local.IsValid(), addr: d.plan.addr,
			mtu: l.cfg.vxlanMTU(l.hostMTU, d.dev.fam.v6), tunnelTo: d.plan.vteps, vni: l.cfg.vxlanVNI(), port: l.cfg.vxlanPort()}
		if want.on {
			want.local = d.local.Addr()
			if mac, err := net.ParseMAC(d.plan.mac); err == nil && len(mac) == 6 {
				want.mac = mac
			} else {
				want.mac = d.mac(l.cfg.NodeName) // what the daemon records
			}
		}
		d.dev.logRefused(d.plan.refused)
		link, err := d.dev.reconcile(want)
		l.noteDevice(link)
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	l.vxlanDirty = false
	return nil
}
