// Package lab builds routed's multi-node lab on one machine: network
// namespaces for nodes on two subnets joined by a router namespace, an
// embedded etcd, a BIRD top-of-rack router, one routed per node (one of
// them a route reflector), and pods created through the real CNI plugin.
// `make demo` and the end-to-end tests both use it.
package lab

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// NodeSpec describes one lab node.
type NodeSpec struct {
	Name   string
	Subnet string       // "a" or "b"
	Addr   netip.Prefix // node address with the subnet's prefix
	// Addr6 is the node's IPv6 address in a dual-stack lab (invalid
	// otherwise).
	Addr6 netip.Prefix
	RR    bool // route reflector
	// Dedicated runs routed with --role route-reflector: BGP only, no
	// dataplane and no pods.
	Dedicated bool
}

// Topology is the lab's shape; names are prefixed so labs can run side
// by side and a re-run can find and remove leftovers.
type Topology struct {
	Prefix   string // short, unique per lab: netns and veth names start with it
	Nodes    []NodeSpec
	PoolCIDR string
	IPIPMode string // Never, Always or CrossSubnet
	// VXLANMode is the pool's vxlanMode (empty: Never); at most one of
	// IPIPMode and VXLANMode is not Never.
	VXLANMode string
	RouterAS  uint32
	NodeAS    uint32
	// SubnetA/B are the two node subnets; the router owns .1 in each.
	SubnetA, SubnetB netip.Prefix
	// NoRouterBGP leaves BIRD out: the router only forwards between the
	// node subnets and no node peers with it. Pod traffic then crosses
	// subnets only through IPIP (IPIPMode Always or CrossSubnet).
	NoRouterBGP bool
	// NoPolicy runs routed without network policy and the CNI plugin
	// without waiting for it (a VM kernel without nftables).
	NoPolicy bool
	// NoNodeBGP leaves out the peering with the route reflector too: no
	// BGP session anywhere, routes come only from the datastore (VXLAN).
	NoNodeBGP bool
	// DualStack adds an IPv6 subnet per node subnet (SubnetA6/B6, the
	// router ::1 in each), an IPv6 address per node, an IPv6 pool
	// (Pool6CIDR) and IPv6 BGP sessions (ToR and route reflector): every
	// pod gets an address of each family.
	DualStack          bool
	SubnetA6, SubnetB6 netip.Prefix
	Pool6CIDR          string
	// Pool6VXLANMode is the IPv6 pool's vxlanMode (empty: Never): its
	// pods' traffic to nodes it encapsulates goes over vxlan-v6.routed.
	Pool6VXLANMode string
	// Configure, when set, replaces writing ConfigYAML: it runs once etcd
	// is up, before BIRD and the nodes start (a test that brings its own
	// datastore state, e.g. a Calico cluster to migrate).
	Configure func(ctx context.Context, l *Lab) error
	// EtcdMembers 3 (or 5, 7) runs an etcd cluster: each member in a
	// namespace of its own on subnet a (<prefix>-e1...), mTLS on client
	// and peer ports, every client given all endpoints. 0 or 1: one
	// plain-http etcd in the router namespace.
	EtcdMembers int
	// CNIViaRouted points each node's CNI plugin at that node's routed
	// (routed_socket): addresses are assigned through routed's CNI socket,
	// as on a real node, and refused while routed holds the datastore.
	// Without it the plugin writes etcd itself.
	CNIViaRouted bool
	// PolicySetupTimeout is the conflist's policy_setup_timeout_seconds
	// (0: 30, as the manifests ship; ignored with NoPolicy).
	PolicySetupTimeout int
}

// DefaultTopology is four nodes over two subnets, n1 the route reflector.
// index picks distinct subnets so labs can run side by side.
func DefaultTopology(prefix string, index int) Topology {
	a := netip.MustParsePrefix(fmt.Sprintf("10.%d.1.0/24", 100+index))
	b := netip.MustParsePrefix(fmt.Sprintf("10.%d.2.0/24", 100+index))
	host := func(p netip.Prefix, n byte) netip.Prefix {
		ip := p.Addr().As4()
		ip[3] = n
		return netip.PrefixFrom(netip.AddrFrom4(ip), p.Bits())
	}
	return Topology{
		Prefix: prefix,
		Nodes: []NodeSpec{
			{Name: prefix + "-n1", Subnet: "a", Addr: host(a, 11), RR: true},
			{Name: prefix + "-n2", Subnet: "a", Addr: host(a, 12)},
			{Name: prefix + "-n3", Subnet: "b", Addr: host(b, 13)},
			{Name: prefix + "-n4", Subnet: "b", Addr: host(b, 14)},
		},
		PoolCIDR: fmt.Sprintf("10.%d.0.0/16", 200+index),
		IPIPMode: "Never",
		RouterAS: 65000,
		NodeAS:   64512,
		SubnetA:  a,
		SubnetB:  b,
	}
}

// WithDualStack returns t with IPv6 subnets, node addresses and pool
// added, numbered after SubnetA's second octet (distinct per lab index,
// as DefaultTopology's ranges are).
func (t Topology) WithDualStack() Topology {
	n := t.SubnetA.Addr().As4()[1]
	t.DualStack = true
	t.SubnetA6 = netip.MustParsePrefix(fmt.Sprintf("fd00:%d:1::/64", n))
	t.SubnetB6 = netip.MustParsePrefix(fmt.Sprintf("fd00:%d:2::/64", n))
	t.Pool6CIDR = fmt.Sprintf("fd00:%d:ff::/48", n)
	nodes := make([]NodeSpec, len(t.Nodes))
	for i, n := range t.Nodes {
		host := n.Addr.Addr().As4()[3]
		n.Addr6 = hostIn(t.subnet6(n.Subnet), uint64(host))
		nodes[i] = n
	}
	t.Nodes = nodes
	return t
}

// hostIn is address number n of p, with p's prefix length.
func hostIn(p netip.Prefix, n uint64) netip.Prefix {
	b := p.Addr().As16()
	for i := 15; i >= 8 && n > 0; i-- {
		b[i] += byte(n)
		n >>= 8
	}
	return netip.PrefixFrom(netip.AddrFrom16(b), p.Bits())
}

func (t Topology) subnet6(subnet string) netip.Prefix {
	if subnet == "b" {
		return t.SubnetB6
	}
	return t.SubnetA6
}

// HostAddr6 is the IPv6 address AddHost gives host number host in a
// dual-stack lab (on SubnetA6).
func (t Topology) HostAddr6(host byte) netip.Prefix { return hostIn(t.SubnetA6, uint64(host)) }

// routerAddr6 is the router's IPv6 address on a node's subnet.
func (t Topology) routerAddr6(subnet string) netip.Prefix { return hostIn(t.subnet6(subnet), 1) }

// routerAddr is the router's address on a node's subnet.
func (t Topology) routerAddr(subnet string) netip.Prefix {
	p := t.SubnetA
	if subnet == "b" {
		p = t.SubnetB
	}
	ip := p.Addr().As4()
	ip[3] = 1
	return netip.PrefixFrom(netip.AddrFrom4(ip), p.Bits())
}

// RouterNS is the router namespace's name.
func (t Topology) RouterNS() string { return t.Prefix + "-rtr" }

// NodeNS is a node namespace's name (the node's name).
func (t Topology) NodeNS(n NodeSpec) string { return n.Name }

// EtcdEndpoint is where the lab's etcd listens: inside the router
// namespace, or every member's URL, comma separated, for a cluster.
func (t Topology) EtcdEndpoint() string {
	if t.clustered() {
		var eps []string
		for i := 0; i < t.EtcdMembers; i++ {
			eps = append(eps, t.EtcdMemberEndpoint(i))
		}
		return strings.Join(eps, ",")
	}
	return "http://" + t.routerAddr("a").Addr().String() + ":2379"
}
