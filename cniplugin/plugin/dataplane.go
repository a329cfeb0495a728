package plugin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// hostSysctls are the host side's settings: for an IPv6 pod the ones
// made at creation first (IPv6 on, no kernel-made link-local address:
// routed-cni adds GatewayIP6 itself), then the ones felix re-asserts.
// The lists belong to the contract with felix (package kernel).
func hostSysctls(dev string, v6 bool) []kernel.Sysctl {
	var out []kernel.Sysctl
	if v6 {
		out = kernel.HostDeviceCreateSysctls6(dev)
	}
	return append(out, kernel.HostDeviceSysctls(dev, v6)...)
}

// containerSysctls6 are set on the container end when the pod has an
// IPv6 address: IPv6 on, and no duplicate address detection, so its
// link-local address can source neighbour solicitations for the gateway
// at once. Only the plugin programs the container's namespace.
func containerSysctls6(dev string) []kernel.Sysctl {
	return []kernel.Sysctl{
		{Path: "net/ipv6/conf/" + dev + "/disable_ipv6", Value: "0"},
		{Path: "net/ipv6/conf/" + dev + "/accept_dad", Value: "0"},
	}
}

// errNoIPv6 marks a host or container without IPv6 (booted with
// ipv6.disable=1): an IPv6 pod address cannot work there.
var errNoIPv6 = errors.New("routed-cni: IPv6 is disabled")

func hasIPv6(ips []net.IP) bool {
	return slices.ContainsFunc(ips, func(ip net.IP) bool { return ip.To4() == nil })
}

func writeSysctl(s kernel.Sysctl) error {
	if err := os.WriteFile(filepath.Join("/proc/sys", s.Path), []byte(s.Value), 0o644); err != nil {
		return fmt.Errorf("set %s=%s: %w", s.Path, s.Value, err)
	}
	return nil
}

func linkExists(name string) (bool, error) {
	_, err := linkByName(name)
	if err == nil {
		return true, nil
	}
	var nf netlink.LinkNotFoundError
	if errors.As(err, &nf) {
		return false, nil
	}
	return false, fmt.Errorf("look up interface %s: %w", name, err)
}

// createVeth makes the pair from inside the container namespace, the host
// end going straight into hostNS with the fixed host MAC. created reports
// whether the pair now exists because of this call, even when a later
// step failed, so the caller knows whether rollback may remove it. A
// name clash on either side fails with errInterfaceExists and creates
// nothing. mac, when set, is the container end's MAC (else the kernel
// picks a random one).
func createVeth(contNS, hostNS ns.NetNS, ifName, hostName string, mtu int, mac net.HardwareAddr) (contMAC net.HardwareAddr, created bool, err error) {
	err = contNS.Do(func(ns.NetNS) error {
		la := netlink.NewLinkAttrs()
		la.Name = ifName
		la.MTU = mtu
		la.HardwareAddr = mac
		veth := &netlink.Veth{
			LinkAttrs:        la,
			PeerName:         hostName,
			PeerNamespace:    netlink.NsFd(int(hostNS.Fd())),
			PeerHardwareAddr: HostMAC,
			PeerMTU:          uint32(mtu),
		}
		if err := netlink.LinkAdd(veth); err != nil {
			if errors.Is(err, unix.EEXIST) {
				if ok, _ := linkExists(ifName); ok {
					return fmt.Errorf("%w: %s already exists in the container's network namespace %s; pick another CNI_IFNAME",
						errInterfaceExists, ifName, contNS.Path())
				}
				return fmt.Errorf("%w: host interface %s already exists", errInterfaceExists, hostName)
			}
			return fmt.Errorf("create veth %s (container) / %s (host) with MTU %d: %w", ifName, hostName, mtu, err)
		}
		created = true
		link, err := linkByName(ifName)
		if err != nil {
			return fmt.Errorf("look up new container interface %s: %w", ifName, err)
		}
		contMAC = link.Attrs().HardwareAddr
		return nil
	})
	return contMAC, created, err
}

// setSysctls writes list; with v6 it first names a missing IPv6 stack
// in where for what it is.
func setSysctls(list []kernel.Sysctl, v6 bool, where string) error {
	if _, err := os.Stat("/proc/sys/net/ipv6"); v6 && err != nil {
		return fmt.Errorf("%w in the %s (no /proc/sys/net/ipv6; was the kernel booted with ipv6.disable=1?): the pod cannot have an IPv6 address: remove the IPv6 pools or set assign_ipv6 \"false\"", errNoIPv6, where)
	}
	for _, s := range list {
		if err := writeSysctl(s); err != nil {
			return err
		}
	}
	return nil
}

// configureHostSide sets the host end's sysctls (and, for an IPv6 pod,
// its link-local gateway address) and brings it up. Runs in the host
// namespace.
func configureHostSide(hostName string, v6 bool) (netlink.Link, error) {
	link, err := linkByName(hostName)
	if err != nil {
		return nil, fmt.Errorf("look up host interface %s: %w", hostName, err)
	}
	if err := setSysctls(hostSysctls(hostName, v6), v6, "host"); err != nil {
		return nil, err
	}
	if v6 {
		gw := &netlink.Addr{IPNet: &net.IPNet{IP: GatewayIP6, Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD, Scope: unix.RT_SCOPE_LINK}
		if err := netlink.AddrAdd(link, gw); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("add gateway address %s to host interface %s: %w", gw.IPNet, hostName, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("set %s up: %w", hostName, err)
	}
	return link, nil
}

// hostPrefix is ip as a host prefix: /32 or /128.
func hostPrefix(ip net.IP) *net.IPNet {
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}
	}
	return &net.IPNet{IP: ip.To16(), Mask: net.CIDRMask(128, 128)}
}

// defaultDst is the default route's destination in ip's family.
func defaultDst(ip net.IP) *net.IPNet {
	if ip.To4() != nil {
		return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
	}
	return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
}

// configureContainerSide brings the container end up with each address
// as a host prefix; IPv4: a scope-link route to 169.254.1.1 and a default
// route via it; IPv6: a default route via the host side's link-local
// GatewayIP6.
func configureContainerSide(contNS ns.NetNS, ifName string, ips []net.IP) error {
	return contNS.Do(func(ns.NetNS) error {
		link, err := linkByName(ifName)
		if err != nil {
			return fmt.Errorf("look up container interface %s: %w", ifName, err)
		}
		v4, v6 := slices.ContainsFunc(ips, func(ip net.IP) bool { return ip.To4() != nil }), hasIPv6(ips)
		if v6 {
			if err := setSysctls(containerSysctls6(ifName), true, "container's network namespace"); err != nil {
				return err
			}
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set container interface %s up: %w", ifName, err)
		}
		for _, ip := range ips {
			a := &netlink.Addr{IPNet: hostPrefix(ip)}
			if ip.To4() == nil {
				a.Flags = unix.IFA_F_NODAD
			}
			if err := netlink.AddrAdd(link, a); err != nil {
				return fmt.Errorf("add %s to container interface %s: %w", a.IPNet, ifName, err)
			}
		}
		if v4 {
			gw := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostPrefix(GatewayIP), Scope: netlink.SCOPE_LINK}
			if err := netlink.RouteAdd(gw); err != nil {
				return fmt.Errorf("add route %s dev %s scope link in container: %w", GatewayIP, ifName, err)
			}
			def := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: defaultDst(GatewayIP), Gw: GatewayIP}
			if err := netlink.RouteAdd(def); err != nil {
				return fmt.Errorf("add default route via %s in container: %w", GatewayIP, err)
			}
		}
		if v6 {
			def := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: defaultDst(GatewayIP6), Gw: GatewayIP6}
			if err := netlink.RouteAdd(def); err != nil {
				return fmt.Errorf("add IPv6 default route via %s dev %s in container: %w", GatewayIP6, ifName, err)
			}
		}
		return nil
	})
}

// addHostRoute programs "<ip>/32 dev <host veth> scope link proto
// kernel.RouteProtocol". A route to the same destination that routed owns (a
// leftover of an earlier pod) is replaced; a foreign one is an error and
// is left alone.
func addHostRoute(link netlink.Link, ip net.IP) (*netlink.Route, error) {
	r := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       hostPrefix(ip),
		Scope:     netlink.SCOPE_LINK,
		Protocol:  kernel.RouteProtocol,
	}
	err := netlink.RouteAdd(r)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("add host route %s dev %s: %w", r.Dst, link.Attrs().Name, err)
	}
	existing, lerr := routeListFiltered(familyOf(ip),
		&netlink.Route{Dst: r.Dst, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if lerr != nil {
		return nil, fmt.Errorf("add host route %s: exists, and listing it failed: %w", r.Dst, lerr)
	}
	for _, e := range existing {
		if e.Protocol != kernel.RouteProtocol {
			dev := fmt.Sprintf("ifindex %d", e.LinkIndex)
			if l, err := netlink.LinkByIndex(e.LinkIndex); err == nil {
				dev = l.Attrs().Name
			}
			return nil, fmt.Errorf("host already has a route to %s (dev %s, proto %d) that routed does not own; remove it or fix the IP pool overlap", r.Dst, dev, e.Protocol)
		}
	}
	if err := netlink.RouteReplace(r); err != nil {
		return nil, fmt.Errorf("replace stale routed route %s: %w", r.Dst, err)
	}
	return r, nil
}

// familyOf is ip's netlink address family.
func familyOf(ip net.IP) int {
	if ip.To4() != nil {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// delRoute removes a route this plugin programmed; already gone is fine.
func delRoute(r *netlink.Route) error {
	if err := netlink.RouteDel(r); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete host route %s: %w", r.Dst, err)
	}
	return nil
}

// delLink removes an interface by name in the current namespace; already
// gone is fine.
func delLink(name string) error {
	link, err := linkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("look up %s: %w", name, err)
	}
	if err := netlink.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}
