package felix

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SetWorkloadPeering sets, per pod interface, the addresses its host
// side holds for the pod's BGP sessions with this node (confd's
// WorkloadPeeringSink; BGPConfiguration localWorkloadPeeringIPV4/IPV6
// on the interfaces of the pods a BGPPeer's localWorkloadSelector
// matches), the whole set each time. Safe for concurrent use; it only
// queues the change.
func (f *Felix) SetWorkloadPeering(byIface map[string][]netip.Addr) {
	m := make(map[string][]netip.Addr, len(byIface))
	for k, v := range byIface {
		m[k] = slices.Clone(v)
	}
	f.enqueue(func(l *loop) {
		now := time.Now()
		for iface, old := range l.st.peering {
			for _, a := range old {
				if !slices.Contains(m[iface], a) {
					l.st.peeringRetired[ifaceAddr{iface, a}] = now
				}
			}
		}
		for iface, addrs := range m {
			for _, a := range addrs {
				delete(l.st.peeringRetired, ifaceAddr{iface, a})
			}
		}
		l.st.peering = m
		l.peeringDirty = true
	})
}

// PeeringRetireGrace is how long a peering address stays on a pod's
// device after confd stopped wanting it: the speaker closes the pod's
// session at the same time (a Cease), and that Cease, sent from the
// peering address, must reach the pod before the address goes, or the
// pod keeps a dead session until its hold timer runs out.
const PeeringRetireGrace = 5 * time.Second

// ifaceAddr is one peering address on one pod device.
type ifaceAddr struct {
	iface string
	addr  netip.Addr
}

// applyPeering makes the host side of every pod device hold exactly the
// peering addresses wanted for it, each as a /32 or /128.
//
// Ownership: felix owns the full-length (/32, /128) addresses on pod
// devices (WorkloadInterfacePrefix) and no other. The CNI plugin puts
// no address on the host side (pods reach the host through 169.254.1.1
// by proxy ARP) and the kernel's IPv6 link-local address is a /64, so a
// full-length address there is one felix added, and one no longer
// wanted (the pod stopped matching, the peering address changed while
// felix was down) is removed, PeeringRetireGrace after confd stopped
// wanting it if felix saw that happen. Two dumps per pass, whatever the number
// of pods.
func (l *loop) applyPeering() error {
	now := time.Now()
	l.peeringWake = time.Time{}
	links, err := l.h.LinkList()
	if err != nil {
		return fmt.Errorf("felix: listing links: %w", err)
	}
	addrs, err := l.h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("felix: listing addresses: %w", err)
	}
	have := map[int][]netip.Addr{}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if ones, bits := a.Mask.Size(); !ok || ones != bits || bits == 0 {
			continue
		}
		have[a.LinkIndex] = append(have[a.LinkIndex], ip.Unmap())
	}
	var errs []error
	for _, lk := range links {
		at := lk.Attrs()
		if !strings.HasPrefix(at.Name, l.cfg.WorkloadInterfacePrefix) {
			continue
		}
		want := l.st.peering[at.Name]
		for _, a := range want {
			if !slices.Contains(have[at.Index], a) {
				errs = append(errs, l.peeringAddr(lk, a, true))
			}
		}
		for _, a := range have[at.Index] {
			if slices.Contains(want, a) {
				continue
			}
			k := ifaceAddr{at.Name, a}
			if since, ok := l.st.peeringRetired[k]; ok && now.Before(since.Add(PeeringRetireGrace)) {
				if until := since.Add(PeeringRetireGrace); l.peeringWake.IsZero() || until.Before(l.peeringWake) {
					l.peeringWake = until
				}
				continue
			}
			errs = append(errs, l.peeringAddr(lk, a, false))
			if a.Is4() {
				// Deleting a device's last IPv4 address makes the kernel
				// flush every IPv4 route through it (fib_disable_ip): the
				// pod's own /32 goes, and with it, through rp_filter, all
				// the pod's traffic. The route table re-reads the kernel
				// and puts it back in this same pass.
				l.rt.Resync()
			}
		}
	}
	for k, since := range l.st.peeringRetired {
		if !now.Before(since.Add(PeeringRetireGrace)) {
			delete(l.st.peeringRetired, k) // gone, or removed above
		}
	}
	return errors.Join(errs...)
}

// peeringAddr adds or removes a on lk; an address already there (add) or
// already gone, or a link gone meanwhile (remove), is success.
func (l *loop) peeringAddr(lk netlink.Link, a netip.Addr, add bool) error {
	na := &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(a.BitLen(), a.BitLen())}}
	if a.Is6() {
		na.Flags = unix.IFA_F_NODAD // the same address is on every peering pod's device
	}
	log := l.log.WithFields(logrus.Fields{"interface": lk.Attrs().Name, "address": a})
	if add {
		if err := l.h.AddrAdd(lk, na); err != nil && !errors.Is(err, unix.EEXIST) {
			if errors.Is(err, unix.ENODEV) {
				return nil // the pod went away; its device with it
			}
			return fmt.Errorf("felix: adding workload peering address %s to %s: %w", a, lk.Attrs().Name, err)
		}
		log.Info("workload peering address on the pod's interface")
		return nil
	}
	if err := l.h.AddrDel(lk, na); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("felix: removing workload peering address %s from %s: %w", a, lk.Attrs().Name, err)
	}
	log.Info("workload peering address removed from the pod's interface")
	return nil
}

// peeringWanted reports whether a pod device that just appeared should
// hold peering addresses.
func (l *loop) peeringWanted(name string) bool {
	return len(l.st.peering[name]) > 0
}
