package policy_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// TestUnreadableEndpointDeniesItsAddresses: an unreadable
// WorkloadEndpoint (here another node's, its pod's address c's) denies,
// before every tier (an Allow in a tier of order 0 does not get past
// it), all traffic from and to the addresses salvaged from it, IPv4 and
// IPv6, proved with packets, while the other pods still talk; with no
// address known, nothing (its own node's pod drops: a deny of all
// traffic would let one endpoint record cut the cluster off). Explain
// names the deny and Unreadable lists it; cleared, traffic flows again.
func TestUnreadableEndpointDeniesItsAddresses(t *testing.T) {
	l := newLab(t)
	l.load(allowAllFirst())
	l.apply()
	v6 := func(p probe) probe { p.v6 = true; return p }
	l.expect("before", pass("c", "a", "tcp", 8080), pass("a", "c", "udp", 5353), v6(pass("c", "a", "tcp", 8080)), pass("a", "b", "tcp", 8080))

	name := "node2-k8s-dev-x-eth0"
	why := errors.New("datastore: corrupt WorkloadEndpoint record: for the test")
	var addrs []netip.Prefix
	for _, a := range []netip.Addr{l.pods["c"].IPv4, l.pods["c"].IPv6} {
		addrs = append(addrs, netip.PrefixFrom(a, a.BitLen()))
	}
	if err := l.m.SetUnreadableEndpoint(name, nil, addrs, why); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.expect("unreadable endpoint with c's addresses",
		drop("c", "a", "tcp", 8080), drop("a", "c", "udp", 5353), drop("d", "c", "tcp", 8080), v6(drop("c", "a", "tcp", 8080)), v6(drop("b", "c", "tcp", 8080)),
		pass("a", "b", "tcp", 8080), pass("d", "b", "udp", 5353), v6(pass("b", "a", "tcp", 8080)))
	in := l.m.Explain(l.flow(drop("c", "a", "tcp", 8080))).Ingress
	if in.Allowed || in.Rule.Tier != policy.UnreadableTier || in.Rule.Policy != policy.UnreadableKey(api.KindWorkloadEndpoint, name) {
		t.Errorf("c->a: ingress decided by %+v, want the unreadable endpoint's deny", in.Rule)
	}
	got := l.m.Unreadable()
	if len(got) != 1 || got[0].Kind != api.KindWorkloadEndpoint || got[0].Name != name || !strings.Contains(got[0].Scope, "10.65.0.3/32") || got[0].Error != why.Error() {
		t.Fatalf("Unreadable() = %+v", got)
	}

	// Its addresses unknown (and no previous version to take them
	// from): nothing beyond its own node's pod, whose interface drops.
	if err := l.m.SetUnreadableEndpoint(name, nil, nil, why); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.expect("unreadable endpoint, addresses unknown", pass("c", "a", "tcp", 8080), pass("a", "b", "tcp", 8080), v6(pass("b", "a", "tcp", 8080)))
	if got := l.m.Unreadable(); len(got) != 1 || !strings.Contains(got[0].Scope, "no single address of it is known") {
		t.Fatalf("Unreadable() = %+v, want one saying no address of it is known", got)
	}

	if !l.m.ClearUnreadable(api.KindWorkloadEndpoint, name) {
		t.Fatal("ClearUnreadable: the endpoint's deny was not there")
	}
	l.apply()
	l.expect("cleared", pass("c", "a", "tcp", 8080), pass("a", "b", "tcp", 8080), v6(pass("c", "a", "tcp", 8080)))
	if got := l.m.Unreadable(); len(got) != 0 {
		t.Fatalf("Unreadable() after clearing = %+v", got)
	}
}

// TestUnreadableEndpointLeavesHostEndpoints: the deny for an unreadable
// WorkloadEndpoint is the workloads': traffic through a host endpoint
// that no applyOnForward policy polices still passes (forwarded and to
// the host), where a deny on the host endpoints' forward chains would
// have made chains that drop at their end.
func TestUnreadableEndpointLeavesHostEndpoints(t *testing.T) {
	h := newHostLab(t)
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"}, api.DefaultAllowProfile)
	open := []hp{hpass("x", "y", "tcp", 80), hpass("y", "x", "tcp", 80), hpass("x", "host", "tcp", 80), hpass("x", "a", "tcp", 8080)}
	h.expect("a host endpoint with the default-allow profile", open...)
	if err := h.m.SetUnreadableEndpoint("node2-k8s-dev-x-eth0", nil, []netip.Prefix{netip.MustParsePrefix("10.99.0.1/32"), netip.MustParsePrefix("fd00:99::1/128")}, errors.New("for the test")); err != nil {
		t.Fatal(err)
	}
	h.apply()
	h.expect("with an unreadable endpoint elsewhere", open...)
}
