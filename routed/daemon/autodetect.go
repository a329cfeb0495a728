package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"

	"github.com/vishvananda/netlink"
)

// ErrAutodetect wraps failures to find the node's address.
var ErrAutodetect = errors.New("daemon: cannot autodetect the node IPv4 address")

// skipIfaces are interfaces that never carry the node address: loopback,
// pod veths, tunnels and container bridges.
var skipIfaces = regexp.MustCompile(`^(lo|cali.*|tunl.*|docker.*|cni.*|veth.*|virbr.*|kube-ipvs.*|flannel.*|vxlan.*|nodelocaldns.*)$`)

// DetectAddress finds the node's IPv4 address with its prefix length, the
// way Calico's IP_AUTODETECTION_METHOD does: "first-found" (default),
// "interface=REGEX" or "can-reach=DEST". The prefix matters: CrossSubnet
// decides by it.
func DetectAddress(method string) (netip.Prefix, error) {
	switch {
	case method == "" || method == "first-found":
		return firstFound(func(name string) bool { return !skipIfaces.MatchString(name) })
	case strings.HasPrefix(method, "interface="):
		re, err := regexp.Compile("^(" + strings.TrimPrefix(method, "interface=") + ")$")
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%w: bad interface regex in %q: %v", ErrAutodetect, method, err)
		}
		return firstFound(re.MatchString)
	case strings.HasPrefix(method, "can-reach="):
		return canReach(strings.TrimPrefix(method, "can-reach="))
	}
	return netip.Prefix{}, fmt.Errorf("%w: unknown method %q (use first-found, interface=REGEX or can-reach=DEST)", ErrAutodetect, method)
}

// firstFound returns the first global IPv4 address on an up interface
// whose name passes ok, in interface index order.
func firstFound(ok func(string) bool) (netip.Prefix, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: %v", ErrAutodetect, err)
	}
	for _, l := range links {
		a := l.Attrs()
		if !ok(a.Name) || a.Flags&net.FlagUp == 0 {
			continue
		}
		if p, found := globalV4(l); found {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: no up interface with a global IPv4 address matched", ErrAutodetect)
}

func globalV4(l netlink.Link) (netip.Prefix, bool) {
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, false
	}
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP.To4())
		if !ok || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
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
func canReach(dest string) (netip.Prefix, error) {
	host := dest
	if _, _, err := net.SplitHostPort(dest); err != nil {
		host = net.JoinHostPort(dest, "80")
	}
	conn, err := net.Dial("udp4", host)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: no route to %s: %v", ErrAutodetect, dest, err)
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap()
	conn.Close()
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%w: %v", ErrAutodetect, err)
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip == local {
			bits, _ := a.Mask.Size()
			return netip.PrefixFrom(ip, bits), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: source address %s towards %s is on no interface", ErrAutodetect, local, dest)
}
