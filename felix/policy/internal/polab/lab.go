// Package polab builds policy test labs: a "node" network namespace with
// one veth pair per pod, the host side named like a Calico workload
// interface (cali...), the pod side eth0 in the pod's own namespace,
// wired as routed's CNI plugin wires pods (a /32 and /128 on eth0, a
// default route via the host, host routes to each pod address on its
// cali device, proxy ARP). Probes (probe.go) send real TCP, UDP and ICMP
// between the namespaces.
//
// Every namespace is the test's own (nstest), so tests from different
// work trees never meet; interface names only need to be unique within
// one node namespace.
package polab

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// HostLinkLocal is the IPv6 gateway every pod uses: the host side of
// each veth carries it (Calico uses a link-local address there too).
const HostLinkLocal = "fe80::1"

// HostIPv4 and HostIPv6 are the node's own addresses, which pods reach
// and which the node uses as its source towards them.
const (
	HostIPv4 = "169.254.1.1"
	HostIPv6 = "fd00:65::ff"
)

// Node is the namespace that holds the cali devices and the policy
// tables.
type Node struct {
	*nstest.NS
	// Fd is the namespace opened for nftables.
	Fd   int
	Pods map[string]*Pod
}

// Pod is one workload: its namespace and addresses.
type Pod struct {
	*nstest.NS
	Iface  string // host-side device
	IPv4   netip.Addr
	IPv6   netip.Addr // invalid when the pod has none
	Labels map[string]string
}

// NewNode creates the node namespace with forwarding on.
func NewNode(t testing.TB) *Node {
	t.Helper()
	n := nstest.New(t)
	f, err := os.Open(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for _, s := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		writeSysctl(t, n, s, "1")
	}
	// Pods resolve their gateway 169.254.1.1 through proxy ARP, which
	// answers for addresses the node has: like a Calico node, this one
	// holds it (on lo) and uses it as its source towards pods.
	n.AddAddr(t, "lo", HostIPv4+"/32")
	n.AddAddr(t, "lo", HostIPv6+"/128")
	return &Node{NS: n, Fd: int(f.Fd()), Pods: map[string]*Pod{}}
}

func writeSysctl(t testing.TB, n *nstest.NS, name, val string) {
	t.Helper()
	n.Do(t, func() error { return os.WriteFile(filepath.Join("/proc/sys", name), []byte(val), 0) })
}

// AddPod creates a pod namespace wired to the node through iface. ip6
// may be empty.
func (n *Node) AddPod(t testing.TB, iface, ip4, ip6 string) *Pod {
	t.Helper()
	p := &Pod{NS: nstest.New(t), Iface: iface, IPv4: netip.MustParseAddr(ip4)}
	if ip6 != "" {
		p.IPv6 = netip.MustParseAddr(ip6)
	}
	n.Veth(t, iface, "eth0")
	peer, err := n.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Handle.LinkSetNsFd(peer, int(p.NetNS.Fd())); err != nil {
		t.Fatalf("moving eth0 to pod %s: %v", iface, err)
	}
	host, err := n.Handle.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	writeSysctl(t, n.NS, "net/ipv4/conf/"+iface+"/proxy_arp", "1")
	writeSysctl(t, n.NS, "net/ipv4/neigh/"+iface+"/proxy_delay", "0")
	eth, err := p.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Handle.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	p.AddAddr(t, "eth0", ip4+"/32")
	gw := netip.MustParseAddr("169.254.1.1")
	mustRoute(t, p.Handle, &netlink.Route{LinkIndex: eth.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(gw, 32)), Scope: netlink.SCOPE_LINK})
	mustRoute(t, p.Handle, &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice(), Dst: prefixNet(netip.MustParsePrefix("0.0.0.0/0"))})
	mustRoute(t, n.Handle, &netlink.Route{LinkIndex: host.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(p.IPv4, 32)), Scope: netlink.SCOPE_LINK})
	if p.IPv6.IsValid() {
		n.AddAddr(t, iface, HostLinkLocal+"/64")
		p.AddAddr(t, "eth0", ip6+"/128")
		mustRoute(t, p.Handle, &netlink.Route{LinkIndex: eth.Attrs().Index, Gw: netip.MustParseAddr(HostLinkLocal).AsSlice(), Dst: prefixNet(netip.MustParsePrefix("::/0"))})
		mustRoute(t, n.Handle, &netlink.Route{LinkIndex: host.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(p.IPv6, 128))})
	}
	n.Pods[iface] = p
	return p
}

func mustRoute(t testing.TB, h *netlink.Handle, r *netlink.Route) {
	t.Helper()
	if err := h.RouteAdd(r); err != nil {
		t.Fatalf("adding route %v: %v", r, err)
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// Addr returns the pod's address of the family (v6 true: IPv6).
func (p *Pod) Addr(v6 bool) netip.Addr {
	if v6 {
		return p.IPv6
	}
	return p.IPv4
}

func (p *Pod) String() string { return fmt.Sprintf("%s(%s)", p.Iface, p.IPv4) }

// Prefixes returns the pod's addresses as host prefixes.
func (p *Pod) Prefixes() []netip.Prefix {
	out := []netip.Prefix{netip.PrefixFrom(p.IPv4, 32)}
	if p.IPv6.IsValid() {
		out = append(out, netip.PrefixFrom(p.IPv6, 128))
	}
	return out
}
