package felix

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// dualNode is a node with both addresses.
func dualNode(name, addr4, addr6 string) *api.Node {
	n := testNode(name, addr4, "", nil)
	n.Spec.BGP.IPv6Address = addr6
	return n
}

// TestComputePlanIPv6 plans a dual-stack node: IPv6 blocks of other
// nodes via their IPv6 addresses (directly on the node's IPv6 subnet,
// through the gateway that reaches them otherwise, never over a
// tunnel), blackholes for its own confirmed IPv6 blocks, /128 pod
// routes, and learned IPv6 routes through the import guard.
func TestComputePlanIPv6(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	v6pool := testPool("v6", "fd00:244::/112", "", true, "")
	v6pool.Spec.IPIPMode = "Always" // refused by the API; routed natively all the same
	s.seed([]api.Resource{
		testPool("v4", "10.244.0.0/16", "Always", false, "all()"),
		v6pool,
		dualNode("a", "192.0.2.1/24", "fd00:10::1/64"),
		dualNode("same", "192.0.2.2/24", "fd00:10::2/64"),
		dualNode("far", "198.51.100.3/24", "fd00:20::3/64"),
		testNode("v4only", "192.0.2.4/24", "", nil),
		testWEP("w1", "a", "cali1", "10.244.1.5/32", "fd00:244::5/128"),
	}, []BlockAffinity{
		{"a", pfx("fd00:244::/122"), AffinityConfirmed},
		{"a", pfx("fd00:244::40/122"), AffinityPending},
		{"same", pfx("fd00:244::80/122"), AffinityConfirmed},
		{"far", pfx("fd00:244::c0/122"), AffinityConfirmed},
		{"v4only", pfx("fd00:244::100/122"), AffinityConfirmed}, // no IPv6 address: not routable
		{"same", pfx("10.244.2.0/26"), AffinityConfirmed},
	})
	s.gateway = func(nh netip.Addr) netip.Addr {
		if nh == addr("fd00:20::3") {
			return addr("fe80::1").WithZone("eth0") // an RA-learned router
		}
		return netip.Addr{}
	}
	s.learned[pfx("fd00:244::80/122")] = learnedRoute{nextHop: addr("fd00:10::2"), peer: addr("fd00:10::2")}  // same as IPAM
	s.learned[pfx("fd00:244::10/124")] = learnedRoute{nextHop: addr("fd00:10::2"), peer: addr("fd00:10::2")}  // inside our block
	s.learned[pfx("2001:db8:1::/48")] = learnedRoute{nextHop: addr("fd00:10::fe"), peer: addr("fd00:10::fe")} // from a ToR
	s.learned[pfx("2001:db8:2::/48")] = learnedRoute{nextHop: addr("fd00:10::2"), peer: addr("fd00:10::2")}   // from a node, outside pools
	s.learned[pfx("fd00:244::140/122")] = learnedRoute{nextHop: addr("fd00:10::2"), peer: addr("fd00:10::2")} // not in IPAM

	p := computePlan(cfg, s)
	want := map[netip.Prefix]routetable.Route{
		pfx("10.244.1.5/32"):    {Dst: pfx("10.244.1.5/32"), Iface: "cali1"},
		pfx("fd00:244::5/128"):  {Dst: pfx("fd00:244::5/128"), Iface: "cali1"},
		pfx("fd00:244::/122"):   {Dst: pfx("fd00:244::/122"), Type: routetable.Blackhole},
		pfx("fd00:244::80/122"): {Dst: pfx("fd00:244::80/122"), Gw: addr("fd00:10::2")},
		pfx("fd00:244::c0/122"): {Dst: pfx("fd00:244::c0/122"), Gw: addr("fe80::1"), Iface: "eth0"},
		pfx("10.244.2.0/26"):    {Dst: pfx("10.244.2.0/26"), Gw: addr("192.0.2.2"), Iface: "tunl0", OnLink: true},
		pfx("2001:db8:1::/48"):  {Dst: pfx("2001:db8:1::/48"), Gw: addr("fd00:10::fe")},
	}
	if len(p.routes) != len(want) {
		t.Errorf("got %d routes, want %d: %v", len(p.routes), len(want), p.routes)
	}
	for dst, w := range want {
		if got := p.routes[dst]; got != w {
			t.Errorf("route %v = %v, want %v", dst, got, w)
		}
	}
	for dst, reason := range map[string]string{
		"fd00:244::10/124":  FilterOwnBlock,
		"2001:db8:2::/48":   FilterClusterOutside,
		"fd00:244::140/122": FilterNotInIPAM,
	} {
		if rej := p.rejected[pfx(dst)]; rej == nil || rej.kind != reason {
			t.Errorf("learned %s: rejection %v, want %s", dst, rej, reason)
		}
	}
	if !p.ipv6 || p.nodeAddr6 != pfx("fd00:10::1/64") {
		t.Errorf("ipv6=%v nodeAddr6=%v, want true fd00:10::1/64", p.ipv6, p.nodeAddr6)
	}
	if len(p.natPools) != 1 || p.natPools[0] != pfx("fd00:244::/112") || len(p.allPools) != 2 {
		t.Errorf("pools all=%v nat=%v", p.allPools, p.natPools)
	}
	// Every route is one the route table accepts.
	rt := routetable.New(routetable.Config{Protocol: kernel.RouteProtocol}, nil)
	if err := rt.SetRoutes(p.routes); err != nil {
		t.Errorf("the route table refuses planned routes: %v", err)
	}
}

// TestIPv6GuardWantsTheIPv6NextHop: a node's IPv6 block announced with
// its IPv4 address (or another node's IPv6 one) as next hop is refused;
// with its own IPv6 address, accepted, whichever session carried it.
func TestIPv6GuardWantsTheIPv6NextHop(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	s.setResource("a", testPool("v6", "fd00:244::/112", "", false, ""))
	s.setResource("a", dualNode("a", "10.0.0.1/24", "fd00:10::1/64"))
	s.setResource("a", dualNode("b", "10.0.0.2/24", "fd00:10::2/64"))
	s.setResource("a", dualNode("c", "10.0.0.3/24", "fd00:10::3/64"))
	s.affinities[affKey{"b", pfx("fd00:244::80/122")}] = BlockAffinity{"b", pfx("fd00:244::80/122"), AffinityConfirmed}
	dst := pfx("fd00:244::80/122")
	for _, c := range []struct {
		lr     learnedRoute
		reason string
	}{
		{learnedRoute{nextHop: addr("fd00:10::2"), peer: addr("fd00:10::2")}, ""},
		{learnedRoute{nextHop: addr("fd00:10::2"), peer: addr("10.0.0.2")}, ""}, // over the IPv4 session
		{learnedRoute{nextHop: addr("fd00:10::3"), peer: addr("fd00:10::3")}, FilterWrongNextHop},
		{learnedRoute{nextHop: addr("fd00:10::3"), peer: addr("10.0.0.3")}, FilterWrongNextHop},
	} {
		s.learned = map[netip.Prefix]learnedRoute{dst: c.lr}
		rej := newGuard(cfg, s, s.sortedPools()).check(dst, c.lr)
		switch {
		case c.reason == "" && rej != nil:
			t.Errorf("%v: refused (%v), want accepted", c.lr, rej)
		case c.reason != "" && (rej == nil || rej.kind != c.reason):
			t.Errorf("%v: rejection %v, want %s", c.lr, rej, c.reason)
		}
	}
	// A family mismatch is never routed.
	if _, ok := routeVia(cfg, s.sortedPools(), pfx("fd00:10::1/64"), dst, addr("10.0.0.2"), nil, nil); ok {
		t.Error("an IPv6 destination was routed via an IPv4 next hop")
	}
}
