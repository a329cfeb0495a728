package autodetect

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ErrAutodetect wraps failures to find the node's address.
var ErrAutodetect = errors.New("autodetect: cannot find the node address")

// skipIfaces are interfaces that never carry the node address: loopback,
// pod veths, tunnels and container bridges.
var skipIfaces = regexp.MustCompile(`^(lo|cali.*|tunl.*|docker.*|cni.*|veth.*|virbr.*|kube-ipvs.*|flannel.*|vxlan.*|nodelocaldns.*)$`)

// Address finds the node's IPv4 address with its prefix length, the
// way Calico's IP_AUTODETECTION_METHOD does: "first-found" (default),
// "interface=REGEX" or "can-reach=DEST". The prefix matters: CrossSubnet
// decides by it.
func Address(method string) (netip.Prefix, error) { return detect(method, 4) }

// Address6 finds the node's IPv6 address (global or unique-local,
// never link-local) the same way (Calico's IP6_AUTODETECTION_METHOD).
func Address6(method string) (netip.Prefix, error) { return detect(method, 6) }

func detect(method string, family int) (netip.Prefix, error) {
	switch {
	case method == "" || method == "first-found":
		return firstFound(func(name string) bool { return !skipIfaces.MatchString(name) }, family)
	case strings.HasPrefix(method, "interface="):
		re, err := regexp.Compile("^(" + strings.TrimPrefix(method, "interface=") + ")$")
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: bad interface regex in %q: %w", ErrAutodetect, method, err)
		}
		return firstFound(re.MatchString, family)
	case strings.HasPrefix(method, "can-reach="):
		return canReach(strings.TrimPrefix(method, "can-reach="), family)
	}
	return netip.Prefix{}, fmt.Errorf("%w: unknown method %q (use first-found, interface=REGEX or can-reach=DEST)", ErrAutodetect, method)
}

// firstFound returns the first global address of family on an up
// interface whose name passes ok, in interface index order.
func firstFound(ok func(string) bool, family int) (netip.Prefix, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: %w", ErrAutodetect, err)
	}
	for _, l := range links {
		a := l.Attrs()
		if !ok(a.Name) || a.Flags&net.FlagUp == 0 {
			continue
		}
		if p, found := globalAddr(l, family); found {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: no up interface with a global IPv%d address matched", ErrAutodetect, family)
}

func nlFamily(family int) int {
	if family == 6 {
		return netlink.FAMILY_V6
	}
	return netlink.FAMILY_V4
}

// usable reports whether a is a node address of family: not loopback,
// link-local, or (IPv6) tentative, deprecated or failed DAD.
func usable(a netlink.Addr, family int) (netip.Addr, bool) {
	ip, ok := netip.AddrFromSlice(a.IP)
	ip = ip.Unmap()
	if !ok || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.Is4() != (family == 4) {
		return netip.Addr{}, false
	}
	if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DEPRECATED|unix.IFA_F_DADFAILED) != 0 {
		return netip.Addr{}, false
	}
	return ip, true
}

func globalAddr(l netlink.Link, family int) (netip.Prefix, bool) {
	addrs, err := netlink.AddrList(l, nlFamily(family))
	if err != nil {
		return netip.Prefix{}, false
	}
	for _, a := range addrs {
		ip, ok := usable(a, family)
		if !ok {
			continue
		}
		bits, _ := a.Mask.Size()
		return netip.PrefixFrom(ip, bits), true
	}
	return netip.Prefix{}, false
}

// canReach picks the source address the kernel would use towards dest,
// then finds the prefix length on the interface that holds it. No packet
// is sent: a UDP "connect" only consults the routing table.
func canReach(dest string, family int) (netip.Prefix, error) {
	host := dest
	if _, _, err := net.SplitHostPort(dest); err != nil {
		host = net.JoinHostPort(dest, "80")
	}
	conn, err := net.Dial(fmt.Sprintf("udp%d", family), host)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: no route to %s: %w", ErrAutodetect, dest, err)
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	conn.Close()
	addrs, err := netlink.AddrList(nil, nlFamily(family))
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: %w", ErrAutodetect, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap() == local {
			ip = ip.Unmap()
			bits, _ := a.Mask.Size()
			return netip.PrefixFrom(ip, bits), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: source address %s towards %s is on no interface", ErrAutodetect, local, dest)
}
