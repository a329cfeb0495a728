package felix

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
)

func testPool(name, cidr, ipip string, nat bool, sel string) *api.IPPool {
	p := &api.IPPool{Metadata: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr, IPIPMode: ipip, NATOutgoing: nat, NodeSelector: sel}}
	api.SetDefaults(p)
	return p
}

// seed gives s the resources as node "a" sees them and the blocks'
// affinities, as the feed would.
func (s *state) seed(rs []api.Resource, affs []BlockAffinity) {
	for _, r := range rs {
		s.setResource("a", r)
	}
	for _, a := range affs {
		s.affinities[affKey{a.Node, a.CIDR}] = a
	}
}

func testNode(name, addr, tunnel string, labels map[string]string) *api.Node {
	return &api.Node{Metadata: api.ObjectMeta{Name: name, Labels: labels},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: addr, IPv4IPIPTunnelAddr: tunnel}}}
}

func testWEP(name, node, iface string, ips ...string) *api.WorkloadEndpoint {
	return &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: name},
		Spec: api.WorkloadEndpointSpec{Node: node, InterfaceName: iface, IPNetworks: ips, ContainerID: "c"}}
}

var (
	pfx  = netip.MustParsePrefix
	addr = netip.MustParseAddr
)

func TestComputePlanRouteShapes(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	s.seed([]api.Resource{
		testPool("always", "10.1.0.0/16", "Always", true, "all()"),
		testPool("cross", "10.2.0.0/16", "CrossSubnet", false, "role == 'x'"),
		testPool("never", "10.3.0.0/16", "Never", true, ""),
		testNode("a", "192.0.2.1/24", "10.1.0.1", map[string]string{"role": "y"}),
		testNode("same", "192.0.2.2/24", "", nil),
		testNode("far", "198.51.100.3/24", "", nil),
		testWEP("w1", "a", "cali1", "10.3.0.5/32"),
		testWEP("w2", "far", "cali9", "10.3.9.9/32"),
	}, []BlockAffinity{
		{"a", pfx("10.3.0.0/26"), AffinityConfirmed},
		{"a", pfx("10.3.0.64/26"), AffinityPending},
		{"same", pfx("10.2.1.0/26"), AffinityConfirmed},
		{"far", pfx("10.2.2.0/26"), AffinityConfirmed},
		{"same", pfx("10.1.1.0/26"), AffinityConfirmed},
		{"same", pfx("10.3.1.0/26"), AffinityConfirmed},
		{"far", pfx("10.3.2.0/26"), AffinityPendingDeletion},
	})
	// "far" borrowed 10.2.1.7 from "same"'s block and announces it.
	s.borrowed[pfx("10.2.1.0/26")] = map[netip.Addr]string{addr("10.2.1.7"): "far"}
	s.learned[pfx("10.2.1.7/32")] = learnedRoute{nextHop: addr("198.51.100.3"), peer: addr("198.51.100.3")}
	s.learned[pfx("10.3.0.5/32")] = learnedRoute{nextHop: addr("192.0.2.2"), peer: addr("192.0.2.2")}     // inside our block: guarded
	s.learned[pfx("172.16.0.0/12")] = learnedRoute{nextHop: addr("192.0.2.1"), peer: addr("192.0.2.254")} // from a ToR, via ourselves: ignored

	p := computePlan(cfg, s)
	want := map[netip.Prefix]routetable.Route{
		pfx("10.3.0.5/32"): {Dst: pfx("10.3.0.5/32"), Iface: "cali1"},
		pfx("10.3.0.0/26"): {Dst: pfx("10.3.0.0/26"), Type: routetable.Blackhole},
		pfx("10.2.1.0/26"): {Dst: pfx("10.2.1.0/26"), Gw: addr("192.0.2.2")},
		pfx("10.2.2.0/26"): {Dst: pfx("10.2.2.0/26"), Gw: addr("198.51.100.3"), Iface: "tunl0", OnLink: true},
		pfx("10.1.1.0/26"): {Dst: pfx("10.1.1.0/26"), Gw: addr("192.0.2.2"), Iface: "tunl0", OnLink: true},
		pfx("10.3.1.0/26"): {Dst: pfx("10.3.1.0/26"), Gw: addr("192.0.2.2")},
		pfx("10.2.1.7/32"): {Dst: pfx("10.2.1.7/32"), Gw: addr("198.51.100.3"), Iface: "tunl0", OnLink: true},
	}
	if len(p.routes) != len(want) {
		t.Errorf("got %d routes, want %d: %v", len(p.routes), len(want), p.routes)
	}
	for dst, w := range want {
		if got := p.routes[dst]; got != w {
			t.Errorf("route %v = %v, want %v", dst, got, w)
		}
	}
	if !p.ipip || p.tunnelAddr != addr("10.1.0.1") {
		t.Errorf("ipip=%v tunnel=%v, want true 10.1.0.1 (pool 'always' selects all nodes)", p.ipip, p.tunnelAddr)
	}
	if len(p.allPools) != 3 || len(p.natPools) != 2 {
		t.Errorf("pools all=%v nat=%v", p.allPools, p.natPools)
	}
}

func TestCrossSubnetUsesTheLocalPrefixLength(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	s.setResource("a", testPool("cross", "10.2.0.0/16", "CrossSubnet", false, ""))
	s.setResource("a", testNode("a", "10.0.0.5/24", "", nil))
	// Blocks of nodes b (same /24) and c (other /24), known only from BGP.
	s.setResource("a", testNode("b", "10.0.0.9/24", "", nil))
	s.setResource("a", testNode("c", "10.0.1.9/24", "", nil))
	s.borrowed[pfx("10.2.1.0/26")] = map[netip.Addr]string{addr("10.2.1.1"): "b"}
	s.borrowed[pfx("10.2.2.0/26")] = map[netip.Addr]string{addr("10.2.2.1"): "c"}
	s.learned[pfx("10.2.1.1/32")] = learnedRoute{nextHop: addr("10.0.0.9"), peer: addr("10.0.0.9")}
	s.learned[pfx("10.2.2.1/32")] = learnedRoute{nextHop: addr("10.0.1.9"), peer: addr("10.0.1.9")}
	p := computePlan(cfg, s)
	if r := p.routes[pfx("10.2.1.1/32")]; !r.Gw.IsValid() || r.Iface != "" || r.OnLink {
		t.Errorf("same-subnet peer got %v, want a direct route", r)
	}
	if r := p.routes[pfx("10.2.2.1/32")]; r.Iface != "tunl0" || !r.OnLink {
		t.Errorf("cross-subnet peer got %v, want via tunl0 onlink", r)
	}
	// With IPIP only in CrossSubnet pools selected by label, a node
	// outside the selector gets no tunnel.
	s.setResource("a", testPool("cross", "10.2.0.0/16", "CrossSubnet", false, "role == 'gw'"))
	if p := computePlan(cfg, s); p.ipip {
		t.Error("an IPIP pool that does not select this node enabled tunl0")
	}
	cfg.Features.DisableIPIP = true
	if r := computePlan(cfg, s).routes[pfx("10.2.2.1/32")]; !r.Gw.IsValid() || r.Iface != "" {
		t.Errorf("with IPIP disabled got %v", r)
	}
}

func TestRouteViaRecursiveGateway(t *testing.T) {
	cfg := &Config{NodeName: "n1"}
	local := netip.MustParsePrefix("10.0.1.11/24")
	pools := []*pool{{cidr: netip.MustParsePrefix("10.244.0.0/16"), ipip: "Never"}}
	gw := func(nh netip.Addr) netip.Addr {
		if nh == netip.MustParseAddr("10.0.2.13") {
			return netip.MustParseAddr("10.0.1.1")
		}
		return netip.Addr{}
	}
	dst := netip.MustParsePrefix("10.244.3.0/26")
	cases := []struct {
		nh, want string
	}{
		{"10.0.2.13", "10.0.1.1"},  // other subnet: through the router that reaches it
		{"10.0.1.12", "10.0.1.12"}, // same subnet: straight to the node
	}
	for _, c := range cases {
		r, ok := routeVia(cfg, pools, local, dst, netip.MustParseAddr(c.nh), gw, nil)
		if !ok || r.Gw != netip.MustParseAddr(c.want) || r.OnLink {
			t.Errorf("next hop %s: got %v (ok %v), want via %s", c.nh, r, ok, c.want)
		}
	}
	// CrossSubnet IPIP pools keep the tunnel next hop: the node itself.
	pools[0].ipip = "CrossSubnet"
	r, _ := routeVia(cfg, pools, local, dst, netip.MustParseAddr("10.0.2.13"), gw, nil)
	if r.Gw != netip.MustParseAddr("10.0.2.13") || !r.OnLink || r.Iface != TunnelDevice {
		t.Errorf("CrossSubnet IPIP: got %v, want via 10.0.2.13 dev tunl0 onlink", r)
	}
}
