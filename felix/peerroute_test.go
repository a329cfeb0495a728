package felix

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
)

// TestPeerRoutesBeatLearnedRoutes: a route to a BGP peer with
// reachableBy is planned through its gateway, beats what the peer
// advertises for its own address (BIRD's static preference 200 over
// BGP's 100 in Calico), leaves covering learned routes alone and goes
// when confd no longer asks for it. A peer that is this node is skipped.
func TestPeerRoutesBeatLearnedRoutes(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	s.setResource("a", testNode("a", "192.0.2.1/24", "", nil))
	// The peer advertises a range holding its own address and its /32.
	s.learned[pfx("10.225.0.0/16")] = learnedRoute{nextHop: addr("192.0.2.77"), peer: addr("10.225.0.4")}
	s.learned[pfx("10.225.0.4/32")] = learnedRoute{nextHop: addr("192.0.2.77"), peer: addr("10.225.0.4")}
	s.peerRoutes = map[netip.Addr]netip.Addr{
		addr("10.225.0.4"):  addr("192.0.2.254"),
		addr("fd00:225::4"): addr("fd00::fe"),
		addr("192.0.2.1"):   addr("192.0.2.254"), // ourselves
	}
	p := computePlan(cfg, s)
	want := map[netip.Prefix]routetable.Route{
		pfx("10.225.0.4/32"):   {Dst: pfx("10.225.0.4/32"), Gw: addr("192.0.2.254")},
		pfx("fd00:225::4/128"): {Dst: pfx("fd00:225::4/128"), Gw: addr("fd00::fe")},
		pfx("10.225.0.0/16"):   {Dst: pfx("10.225.0.0/16"), Gw: addr("192.0.2.77")},
	}
	if len(p.routes) != len(want) {
		t.Errorf("got %d routes, want %d: %v", len(p.routes), len(want), p.routes)
	}
	for dst, w := range want {
		if got := p.routes[dst]; got != w {
			t.Errorf("route %v = %v, want %v", dst, got, w)
		}
	}

	if r := p.rejected[pfx("10.225.0.4/32")]; r == nil || r.kind != FilterReachableBy {
		t.Errorf("the learned /32 of the peer is not listed as set aside for reachableBy: %v", r)
	}
	if r := p.rejected[pfx("10.225.0.0/16")]; r != nil {
		t.Errorf("the covering learned route is listed as filtered: %v", r)
	}

	s.peerRoutes = nil
	p = computePlan(cfg, s)
	if len(p.rejected) != 0 {
		t.Errorf("without reachableBy, filtered: %v", p.rejected)
	}
	if got := p.routes[pfx("10.225.0.4/32")]; got.Gw != addr("192.0.2.77") {
		t.Errorf("without reachableBy the peer's /32 is %v, want the learned route via 192.0.2.77", got)
	}
	if _, ok := p.routes[pfx("fd00:225::4/128")]; ok {
		t.Error("the IPv6 peer route stayed after confd dropped it")
	}
}
