package wireguard

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// SetAddress makes want (a host prefix: /32 or /128) the only address
// of its family on the device link, other than IPv6 link-local ones;
// an invalid want removes them all. The address is the node's WireGuard
// tunnel address (its Node's spec.wireguard): routes through the device
// use it as their source, so the node's host reaches other nodes' pods
// from an address those nodes route back through their own devices
// (their reverse-path check passes). The device is felix's alone, so
// any other address of the family on it is stale and goes. New first,
// then the stale ones, so the device is never without an address while
// one is wanted. A device address added by hand is removed too.
func SetAddress(h *netlink.Handle, link netlink.Link, family int, want netip.Addr) error {
	nlFam := netlink.FAMILY_V4
	if family == 6 {
		nlFam = netlink.FAMILY_V6
	}
	have, err := h.AddrList(link, nlFam)
	if err != nil {
		return fmt.Errorf("wireguard: %s: listing addresses: %w", link.Attrs().Name, err)
	}
	var stale []netlink.Addr
	found := false
	for _, a := range have {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		ones, _ := a.Mask.Size()
		switch {
		case ip.IsLinkLocalUnicast():
		case ip == want && ones == want.BitLen():
			found = true
		default:
			stale = append(stale, a)
		}
	}
	if want.IsValid() && !found {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: want.AsSlice(), Mask: net.CIDRMask(want.BitLen(), want.BitLen())}}
		if family == 6 {
			a.Flags = unix.IFA_F_NODAD // a /128 of our own: no duplicate detection delay
		}
		if err := h.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("wireguard: %s: adding address %s: %w", link.Attrs().Name, want, err)
		}
		log.WithFields(map[string]any{"device": link.Attrs().Name, "address": want}).Info("WireGuard device address set")
	}
	for i := range stale {
		if err := h.AddrDel(link, &stale[i]); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("wireguard: %s: removing stale address %s: %w", link.Attrs().Name, stale[i].IPNet, err)
		}
		log.WithFields(map[string]any{"device": link.Attrs().Name, "address": stale[i].IPNet}).Info("stale WireGuard device address removed")
	}
	return nil
}
