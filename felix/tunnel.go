package felix

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/sirupsen/logrus"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoIPIP means the kernel cannot create ipip devices (no ipip module).
var ErrNoIPIP = errors.New("felix: kernel has no IPIP support")

// tunnel manages tunl0: present, up, MTU host-20 and holding the node's
// tunnel address while an IPIP pool selects this node; otherwise only its
// addresses are removed and the device is left alone.
type tunnel struct {
	h   *netlink.Handle
	log *logrus.Entry
	// noIPIP is set once the kernel refused to create tunl0; warned
	// makes sure the operator hears about it once, not every resync.
	noIPIP, warned bool
}

// reconcile brings tunl0 in line and returns the device if it exists.
func (t *tunnel) reconcile(want bool, addr netip.Addr, mtu int) (netlink.Link, error) {
	link, err := t.h.LinkByName(TunnelDevice)
	var notFound netlink.LinkNotFoundError
	if err != nil && !errors.As(err, &notFound) {
		return nil, fmt.Errorf("felix: looking up %s: %w", TunnelDevice, err)
	}
	if link == nil {
		if !want {
			return nil, nil
		}
		if link, err = t.create(mtu); err != nil || link == nil {
			return nil, err
		}
	}
	if !want {
		return link, t.setAddrs(link, netip.Addr{})
	}
	if link.Type() != "ipip" {
		return link, fmt.Errorf("felix: %s exists but is a %s device, not ipip", TunnelDevice, link.Type())
	}
	a := link.Attrs()
	if a.MTU != mtu {
		if err := t.h.LinkSetMTU(link, mtu); err != nil {
			return link, fmt.Errorf("felix: setting %s MTU %d: %w", TunnelDevice, mtu, err)
		}
		t.log.WithField("mtu", mtu).Info("set tunl0 MTU")
	}
	if a.Flags&net.FlagUp == 0 {
		if err := t.h.LinkSetUp(link); err != nil {
			return link, fmt.Errorf("felix: bringing %s up: %w", TunnelDevice, err)
		}
	}
	if err := t.setAddrs(link, addr); err != nil {
		return link, err
	}
	// Re-read so the caller sees the up state and index.
	if l, err := t.h.LinkByName(TunnelDevice); err == nil {
		link = l
	}
	return link, nil
}

func (t *tunnel) create(mtu int) (netlink.Link, error) {
	err := t.h.LinkAdd(&netlink.Iptun{LinkAttrs: netlink.LinkAttrs{Name: TunnelDevice, MTU: mtu}})
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EAFNOSUPPORT) {
		t.noIPIP = true
		if !t.warned {
			t.warned = true
			t.log.WithError(err).Error("the kernel has no IPIP support (ipip module missing or not loadable): " +
				"tunl0 cannot be created, so routes for IPIP pools are not programmed; " +
				"pools with ipipMode Never are served normally. Load the ipip module and felix picks it up at the next resync.")
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("felix: creating %s: %w", TunnelDevice, err)
	}
	if t.noIPIP {
		t.log.Info("the kernel supports IPIP now; created tunl0")
	}
	t.noIPIP = false
	l, err := t.h.LinkByName(TunnelDevice)
	if err != nil {
		return nil, fmt.Errorf("felix: %s after creating it: %w", TunnelDevice, err)
	}
	t.log.Info("created tunl0")
	return l, nil
}

// setAddrs leaves exactly addr/32 (none when addr is invalid) on link.
func (t *tunnel) setAddrs(link netlink.Link, addr netip.Addr) error {
	return setHostAddr(t.h, t.log, link, addr, false)
}

// setHostAddr leaves exactly addr/32, or addr/128 when v6 (none when
// addr is invalid), of that family on a tunnel device felix owns. The
// IPv6 link-local address the kernel gives a device is its own and
// stays.
func setHostAddr(h *netlink.Handle, log *logrus.Entry, link netlink.Link, addr netip.Addr, v6 bool) error {
	name := link.Attrs().Name
	family, bits := netlink.FAMILY_V4, 32
	if v6 {
		family, bits = netlink.FAMILY_V6, 128
	}
	addrs, err := h.AddrList(link, family)
	if err != nil {
		return fmt.Errorf("felix: listing %s addresses: %w", name, err)
	}
	have := false
	for _, a := range addrs {
		ip, _ := netip.AddrFromSlice(a.IP)
		ip = ip.Unmap()
		ones, _ := a.Mask.Size()
		if ip.IsLinkLocalUnicast() && ip.Is6() {
			continue
		}
		if addr.IsValid() && ip == addr && ones == bits {
			have = true
			continue
		}
		if err := h.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("felix: removing %s from %s: %w", a.IPNet, name, err)
		}
		log.WithFields(logrus.Fields{"addr": a.IPNet.String(), "device": name}).Info("removed tunnel address")
	}
	if addr.IsValid() && !have {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(bits, bits)}}
		if v6 {
			// Its own VTEP address: no duplicate detection to wait for.
			a.Flags = unix.IFA_F_NODAD
		}
		if err := h.AddrAdd(link, a); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("felix: adding %s to %s: %w", addr, name, err)
		}
		log.WithFields(logrus.Fields{"addr": addr, "device": name}).Info("set tunnel address")
	}
	return nil
}
