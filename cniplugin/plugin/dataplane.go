package plugin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The host side of a workload veth: proxy ARP answers the pod's ARP for
// the link-local gateway with the host MAC, without delay, and the
// interface forwards. Paths are under /proc/sys, in the namespace of the
// calling thread.
var hostSysctls = []struct{ path, value string }{
	{"net/ipv4/conf/%s/proxy_arp", "1"},
	{"net/ipv4/neigh/%s/proxy_delay", "0"},
	{"net/ipv4/conf/%s/forwarding", "1"},
}

func writeSysctl(pattern, iface, value string) error {
	p := filepath.Join("/proc/sys", fmt.Sprintf(pattern, iface))
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("set %s=%s: %w", strings.TrimPrefix(p, "/proc/sys/"), value, err)
	}
	return nil
}

func readSysctl(pattern, iface string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", fmt.Sprintf(pattern, iface)))
	return strings.TrimSpace(string(b)), err
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
// nothing.
func createVeth(contNS, hostNS ns.NetNS, ifName, hostName string, mtu int) (contMAC net.HardwareAddr, created bool, err error) {
	err = contNS.Do(func(ns.NetNS) error {
		la := netlink.NewLinkAttrs()
		la.Name = ifName
		la.MTU = mtu
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

// configureHostSide sets the host end's sysctls and brings it up. Runs in
// the host namespace.
func configureHostSide(hostName string) (netlink.Link, error) {
	link, err := linkByName(hostName)
	if err != nil {
		return nil, fmt.Errorf("look up host interface %s: %w", hostName, err)
	}
	for _, s := range hostSysctls {
		if err := writeSysctl(s.path, hostName, s.value); err != nil {
			return nil, err
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return nil, fmt.Errorf("set %s up: %w", hostName, err)
	}
	return link, nil
}

func hostPrefix(ip net.IP) *net.IPNet {
	return &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)}
}

// configureContainerSide brings the container end up with each address
// as a /32, a scope-link route to the gateway and a default route via it.
func configureContainerSide(contNS ns.NetNS, ifName string, ips []net.IP) error {
	return contNS.Do(func(ns.NetNS) error {
		link, err := linkByName(ifName)
		if err != nil {
			return fmt.Errorf("look up container interface %s: %w", ifName, err)
		}
		if err := netlink.LinkSetUp(link); err != nil {
			return fmt.Errorf("set container interface %s up: %w", ifName, err)
		}
		for _, ip := range ips {
			if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: hostPrefix(ip)}); err != nil {
				return fmt.Errorf("add %s/32 to container interface %s: %w", ip, ifName, err)
			}
		}
		gw := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: hostPrefix(GatewayIP), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteAdd(gw); err != nil {
			return fmt.Errorf("add route %s dev %s scope link in container: %w", GatewayIP, ifName, err)
		}
		def := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gw: GatewayIP}
		if err := netlink.RouteAdd(def); err != nil {
			return fmt.Errorf("add default route via %s in container: %w", GatewayIP, err)
		}
		return nil
	})
}

// addHostRoute programs "<ip>/32 dev <host veth> scope link proto
// RouteProtocol". A route to the same destination that routed owns (a
// leftover of an earlier pod) is replaced; a foreign one is an error and
// is left alone.
func addHostRoute(link netlink.Link, ip net.IP) (*netlink.Route, error) {
	r := &netlink.Route{
		LinkIndex: link.Attrs().Index,
		Dst:       hostPrefix(ip),
		Scope:     netlink.SCOPE_LINK,
		Protocol:  RouteProtocol,
	}
	err := netlink.RouteAdd(r)
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("add host route %s dev %s: %w", r.Dst, link.Attrs().Name, err)
	}
	existing, lerr := routeListFiltered(netlink.FAMILY_V4,
		&netlink.Route{Dst: r.Dst, Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_DST|netlink.RT_FILTER_TABLE)
	if lerr != nil {
		return nil, fmt.Errorf("add host route %s: exists, and listing it failed: %w", r.Dst, lerr)
	}
	for _, e := range existing {
		if e.Protocol != RouteProtocol {
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
