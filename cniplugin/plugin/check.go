//go:build !cnithin

package plugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/pkg/kernel/nldump"
)

// errCheck marks a CHECK that found the attachment differing from what
// ADD set up.
var errCheck = errors.New("routed-cni: CHECK found differences")

// CmdCheck verifies that the attachment still looks as ADD left it: both
// veth ends, addresses, routes in the container and on the host, and the
// WorkloadEndpoint. It reports every difference, not just the first.
func (p *Plugin) CmdCheck(args *skel.CmdArgs) error {
	return runVerb(args, "CHECK", p.check)
}

func (p *Plugin) check(ctx context.Context, c *call) error {
	args, conf := c.args, c.conf
	if conf.RawPrevResult == nil {
		return fmt.Errorf("%w: CHECK needs prevResult (the runtime passes the ADD result)", errConfig)
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return fmt.Errorf("%w: prevResult: %w", errConfig, err)
	}
	prev, err := current.NewResultFromResult(conf.PrevResult)
	if err != nil {
		return fmt.Errorf("%w: prevResult: %w", errConfig, err)
	}
	store, err := p.openStore(conf)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := ipamFor(c, store).check(ctx, prev); err != nil {
		return fmt.Errorf("IPAM plugin %s CHECK: %w", conf.IPAM.Type, err)
	}
	var want []net.IP
	for _, ipc := range prev.IPs {
		want = append(want, ipc.Address.IP)
	}
	var diffs []string
	d := func(format string, a ...any) { diffs = append(diffs, fmt.Sprintf(format, a...)) }

	contMAC := ""
	if i := slices.IndexFunc(prev.Interfaces, func(i *current.Interface) bool {
		return i.Name == args.IfName && i.Sandbox == args.Netns
	}); i >= 0 {
		contMAC = prev.Interfaces[i].Mac
	} else {
		d("prevResult has no interface %s in sandbox %s", args.IfName, args.Netns)
	}
	hostIndex := checkHost(c.hostVeth, want, d)
	checkContainer(args.Netns, args.IfName, hostIndex, want, d)

	wep, err := getEndpoint(ctx, store, c.wepName())
	if err != nil {
		return err
	}
	checkEndpoint(c, wep, want, contMAC, d)
	if len(diffs) > 0 {
		return fmt.Errorf("%w for %s: %s", errCheck, c.describe(), strings.Join(diffs, "; "))
	}
	return nil
}

// checkHost verifies the host end and its routes; it returns the host
// end's ifindex (0 when missing).
func checkHost(name string, ips []net.IP, d func(string, ...any)) int {
	link, err := linkByName(name)
	if err != nil {
		d("host interface %s: %v", name, err)
		return 0
	}
	if _, ok := link.(*netlink.Veth); !ok {
		d("host interface %s is a %s, not a veth", name, link.Type())
	}
	if link.Attrs().HardwareAddr.String() != HostMAC.String() {
		d("host interface %s has MAC %s, want %s", name, link.Attrs().HardwareAddr, HostMAC)
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		d("host interface %s is down", name)
	}
	sysctls := hostSysctls(name, hasIPv6(ips))
	if hasIPv6(ips) {
		if addrs, err := addrList(link, netlink.FAMILY_V6); err != nil || !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IP.Equal(GatewayIP6) }) {
			d("host interface %s lacks the pods' IPv6 gateway address %s (err %v)", name, GatewayIP6, err)
		}
	}
	for _, s := range sysctls {
		if v, err := readSysctl(s.Path); err != nil || v != s.Value {
			d("host sysctl %s is %q (err %v), want %s", s.Path, v, err, s.Value)
		}
	}
	routes, err := routeListFiltered(netlink.FAMILY_ALL,
		&netlink.Route{LinkIndex: link.Attrs().Index, Protocol: kernel.RouteProtocol}, netlink.RT_FILTER_OIF|netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		d("list host routes on %s: %v", name, err)
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
			// The kernel keeps IPv6 routes at universe scope.
			return r.Dst != nil && r.Dst.String() == hostPrefix(ip).String() && (r.Scope == netlink.SCOPE_LINK || ip.To4() == nil)
		}) {
			d("host route %s dev %s scope link proto %d is missing", hostPrefix(ip), name, kernel.RouteProtocol)
		}
	}
	return link.Attrs().Index
}

// checkContainer verifies the container end, its addresses and routes.
func checkContainer(netnsPath, ifName string, hostIndex int, ips []net.IP, d func(string, ...any)) {
	err := ns.WithNetNSPath(netnsPath, func(ns.NetNS) error {
		link, err := linkByName(ifName)
		if err != nil {
			d("container interface %s: %v", ifName, err)
			return nil
		}
		if _, ok := link.(*netlink.Veth); !ok {
			d("container interface %s is a %s, not a veth", ifName, link.Type())
		}
		if hostIndex != 0 && link.Attrs().ParentIndex != hostIndex {
			d("container interface %s is not paired with the host interface (peer ifindex %d, host ifindex %d)", ifName, link.Attrs().ParentIndex, hostIndex)
		}
		addrs, err := addrList(link, netlink.FAMILY_ALL)
		if err != nil {
			d("list addresses of %s: %v", ifName, err)
		}
		for _, ip := range ips {
			if !slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IPNet.String() == hostPrefix(ip).String() }) {
				d("container interface %s lacks address %s", ifName, hostPrefix(ip))
			}
		}
		routes, err := routeList(link, netlink.FAMILY_ALL)
		if err != nil {
			d("list container routes: %v", err)
		}
		hasDefault := func(gw net.IP) bool {
			return slices.ContainsFunc(routes, func(r netlink.Route) bool {
				return (r.Dst == nil || r.Dst.String() == defaultDst(gw).String()) && r.Gw.Equal(gw)
			})
		}
		if slices.ContainsFunc(ips, func(ip net.IP) bool { return ip.To4() != nil }) {
			if !slices.ContainsFunc(routes, func(r netlink.Route) bool {
				return r.Dst != nil && r.Dst.String() == hostPrefix(GatewayIP).String() && r.Scope == netlink.SCOPE_LINK
			}) {
				d("container route %s dev %s scope link is missing", GatewayIP, ifName)
			}
			if !hasDefault(GatewayIP) {
				d("container default route via %s is missing", GatewayIP)
			}
		}
		if hasIPv6(ips) && !hasDefault(GatewayIP6) {
			d("container IPv6 default route via %s is missing", GatewayIP6)
		}
		return nil
	})
	if err != nil {
		d("container network namespace %s: %v", netnsPath, err)
	}
}

// checkEndpoint compares the stored endpoint with this attachment.
func checkEndpoint(c *call, w *api.WorkloadEndpoint, ips []net.IP, contMAC string, d func(string, ...any)) {
	if w == nil {
		d("WorkloadEndpoint %s is missing", c.wepName())
		return
	}
	s := w.Spec
	if s.ContainerID != c.args.ContainerID {
		d("WorkloadEndpoint %s belongs to container %s", c.wepName(), s.ContainerID)
	}
	if s.InterfaceName != c.hostVeth {
		d("WorkloadEndpoint interfaceName is %s, want %s", s.InterfaceName, c.hostVeth)
	}
	if s.Node != c.node {
		d("WorkloadEndpoint node is %s, want %s", s.Node, c.node)
	}
	var want []string
	for _, ip := range ips {
		want = append(want, hostPrefix(ip).String())
	}
	if !slices.Equal(s.IPNetworks, want) {
		d("WorkloadEndpoint ipNetworks are %v, want %v", s.IPNetworks, want)
	}
	if contMAC != "" && !strings.EqualFold(s.MAC, contMAC) {
		d("WorkloadEndpoint mac is %s, want %s", s.MAC, contMAC)
	}
}

// CHECK's readers of what the kernel has (only CHECK reads it back).

func readSysctl(path string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", path))
	return strings.TrimSpace(string(b)), err
}

func addrList(link netlink.Link, family int) ([]netlink.Addr, error) {
	return nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(link, family) })
}

func routeList(link netlink.Link, family int) ([]netlink.Route, error) {
	return nldump.Retry(func() ([]netlink.Route, error) { return netlink.RouteList(link, family) })
}
