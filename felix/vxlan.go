package felix

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// vxlanDev manages vxlan.routed and everything on it: the device (VNI,
// port, local address, MTU host-50, MAC, up, its /32), and for each
// remote VTEP a permanent ARP entry (VTEP address -> MAC) and a
// permanent FDB entry (MAC -> node address). The device is routed's
// alone (its name says so), so every permanent entry on it that is not
// wanted is stale and removed; entries the kernel creates itself are
// left alone. Each reconcile re-reads the kernel: the lists are one
// entry per node.
type vxlanDev struct {
	h   *netlink.Handle
	log *logrus.Entry
}

// vxlanWant is the device felix wants; a zero value means none.
type vxlanWant struct {
	on       bool
	local    netip.Addr // node address: source of encapsulated packets
	addr     netip.Addr // the device's own address
	mac      net.HardwareAddr
	mtu      int
	tunnelTo map[netip.Addr]vtep
}

// reconcile brings vxlan.routed in line with want and returns the device
// if it exists afterwards.
func (v *vxlanDev) reconcile(want vxlanWant) (netlink.Link, error) {
	link, err := v.h.LinkByName(VXLANDevice)
	var notFound netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &notFound) {
		return nil, fmt.Errorf("felix: looking up %s: %w", VXLANDevice, err)
	}
	if !want.on {
		if link != nil {
			if err := v.h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
				return link, fmt.Errorf("felix: removing %s: %w", VXLANDevice, err)
			}
			v.log.Info("removed " + VXLANDevice + ": no VXLAN pool selects this node")
		}
		return nil, nil
	}
	if link != nil && !v.matches(link, want) {
		// VNI, port and local address cannot change in place.
		if err := v.h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return link, fmt.Errorf("felix: replacing %s: %w", VXLANDevice, err)
		}
		v.log.Info("recreating " + VXLANDevice + ": its VNI, port or local address changed")
		link = nil
	}
	if link == nil {
		dev := &netlink.Vxlan{
			LinkAttrs: netlink.LinkAttrs{Name: VXLANDevice, MTU: want.mtu, HardwareAddr: want.mac},
			VxlanId:   VXLANVNI, Port: VXLANPort, SrcAddr: want.local.AsSlice(), Learning: false,
		}
		addErr := v.h.LinkAdd(dev)
		if addErr != nil && !errors.Is(addErr, unix.EEXIST) {
			return nil, fmt.Errorf("felix: creating %s (VNI %d, port %d): %w", VXLANDevice, VXLANVNI, VXLANPort, addErr)
		}
		if link, err = v.h.LinkByName(VXLANDevice); err != nil {
			if other := v.holderOfVNI(); addErr != nil && other != "" {
				// EEXIST without our device: the kernel allows one VXLAN
				// device per VNI and port (Calico's vxlan.calico, left on a
				// node moved from Calico).
				return nil, fmt.Errorf("felix: creating %s: %s already uses VNI %d on port %d; delete it (ip link del %s): %w",
					VXLANDevice, other, VXLANVNI, VXLANPort, other, addErr)
			}
			return nil, fmt.Errorf("felix: %s after creating it: %w", VXLANDevice, err)
		}
		v.log.WithFields(logrus.Fields{"vni": VXLANVNI, "port": VXLANPort, "local": want.local, "mac": want.mac.String()}).Info("created " + VXLANDevice)
	}
	a := link.Attrs()
	if a.MTU != want.mtu {
		if err := v.h.LinkSetMTU(link, want.mtu); err != nil {
			return link, fmt.Errorf("felix: setting %s MTU %d: %w", VXLANDevice, want.mtu, err)
		}
	}
	if !bytes.Equal(a.HardwareAddr, want.mac) {
		if err := v.h.LinkSetHardwareAddr(link, want.mac); err != nil {
			return link, fmt.Errorf("felix: setting %s MAC %s: %w", VXLANDevice, want.mac, err)
		}
	}
	if a.Flags&net.FlagUp == 0 {
		if err := v.h.LinkSetUp(link); err != nil {
			return link, fmt.Errorf("felix: bringing %s up: %w", VXLANDevice, err)
		}
	}
	if err := setHostAddr(v.h, v.log, link, want.addr); err != nil {
		return link, err
	}
	if l, err := v.h.LinkByName(VXLANDevice); err == nil {
		link = l
	}
	return link, errors.Join(v.syncNeighbours(link, want.tunnelTo), v.syncFDB(link, want.tunnelTo))
}

// holderOfVNI names another VXLAN device using routed's VNI and port,
// "" if none.
func (v *vxlanDev) holderOfVNI() string {
	links, err := v.h.LinkList()
	if err != nil {
		return ""
	}
	for _, l := range links {
		if x, ok := l.(*netlink.Vxlan); ok && x.Name != VXLANDevice && x.VxlanId == VXLANVNI && x.Port == VXLANPort {
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
	return x.VxlanId == VXLANVNI && x.Port == VXLANPort && src.Unmap() == want.local && !x.Learning
}

// syncNeighbours leaves exactly one permanent ARP entry per VTEP.
func (v *vxlanDev) syncNeighbours(link netlink.Link, vteps map[netip.Addr]vtep) error {
	want := map[netip.Addr]net.HardwareAddr{}
	for _, t := range vteps {
		want[t.addr] = t.mac
	}
	return v.syncEntries(link, netlink.FAMILY_V4, "ARP", want, func(t netip.Addr, mac net.HardwareAddr) *netlink.Neigh {
		return &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: netlink.FAMILY_V4, State: netlink.NUD_PERMANENT,
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
		return fmt.Errorf("felix: listing %s %s entries: %w", VXLANDevice, what, err)
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
		v.log.WithFields(logrus.Fields{"ip": ip, "mac": n.HardwareAddr.String()}).Info("removed stale " + VXLANDevice + " " + what + " entry")
	}
	for ip, mac := range want {
		if ok[ip] {
			continue
		}
		if err := v.h.NeighSet(entry(ip, mac)); err != nil {
			errs = append(errs, fmt.Errorf("felix: adding %s entry %s %s: %w", what, ip, mac, err))
			continue
		}
		v.log.WithFields(logrus.Fields{"ip": ip, "mac": mac.String()}).Debug("set " + VXLANDevice + " " + what + " entry")
	}
	return errors.Join(errs...)
}

// vxlanChanged reports whether vxlan.routed or its entries must be
// reconciled between two plans.
func vxlanChanged(old, cur *plan) bool {
	if old.vxlan != cur.vxlan || old.vxlanAddr != cur.vxlanAddr || old.vxlanMAC != cur.vxlanMAC ||
		old.nodeAddr != cur.nodeAddr || len(old.vteps) != len(cur.vteps) {
		return true
	}
	for k, v := range cur.vteps {
		o, ok := old.vteps[k]
		if !ok || o.addr != v.addr || !bytes.Equal(o.mac, v.mac) {
			return true
		}
	}
	return false
}

// applyVXLAN reconciles vxlan.routed and tells the route table about it.
func (l *loop) applyVXLAN() error {
	p := l.plan
	want := vxlanWant{on: p.vxlan && p.nodeAddr.IsValid(), addr: p.vxlanAddr,
		mtu: l.hostMTU - VXLANOverhead, tunnelTo: p.vteps}
	if want.on {
		want.local = p.nodeAddr.Addr()
		if mac, err := net.ParseMAC(p.vxlanMAC); err == nil && len(mac) == 6 {
			want.mac = mac
		} else {
			want.mac = VXLANMAC(l.cfg.NodeName) // what the daemon records
		}
	}
	link, err := l.vx.reconcile(want)
	l.noteDevice(link)
	if err != nil {
		return err
	}
	l.vxlanDirty = false
	return nil
}
