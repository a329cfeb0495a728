package policy_test

import (
	"errors"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
)

// TestUnreadableDeniesItsScope: a record that does not decode denies,
// before every tier (an Allow in a tier of order 0 does not get past
// it), all traffic of its scope, proved with packets: a NetworkPolicy's
// namespace, both directions, while another namespace's pods still
// talk; a global kind's, every workload. Explain names the deny and
// Unreadable lists it; cleared, traffic flows again.
func TestUnreadableDeniesItsScope(t *testing.T) {
	l := newLab(t)
	l.addPod("e", "dev", "sa-e", map[string]string{"app": "e"}, nil)
	l.load(allowAllFirst())
	l.apply()
	l.expect("before", pass("a", "b", "tcp", 8080), pass("c", "a", "tcp", 8080), pass("c", "e", "tcp", 8080))

	why := errors.New("datastore: corrupt NetworkPolicy record: for the test")
	if err := l.m.SetUnreadable(api.KindNetworkPolicy, "prod.broken", why); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.expect("unreadable NetworkPolicy in prod",
		drop("a", "b", "tcp", 8080), drop("b", "a", "udp", 5353), drop("c", "a", "tcp", 8080), drop("a", "c", "tcp", 8080),
		pass("c", "e", "tcp", 8080), pass("e", "c", "udp", 5353))
	for _, p := range []probe{drop("a", "b", "tcp", 8080), drop("c", "a", "tcp", 8080)} {
		in := l.m.Explain(l.flow(p)).Ingress
		if in.Allowed || in.Rule.Tier != policy.UnreadableTier || in.Rule.Policy != policy.UnreadableKey(api.KindNetworkPolicy, "prod.broken") {
			t.Errorf("%s->%s: ingress decided by %+v, want the unreadable record's deny", p.from, p.to, in.Rule)
		}
	}
	got := l.m.Unreadable()
	if len(got) != 1 || got[0].Kind != api.KindNetworkPolicy || got[0].Name != "prod.broken" || got[0].Scope != "namespace prod" || got[0].Error != why.Error() {
		t.Fatalf("Unreadable() = %+v", got)
	}

	if err := l.m.SetUnreadable(api.KindGlobalNetworkSet, "broken-set", why); err != nil {
		t.Fatal(err)
	}
	if !l.m.ClearUnreadable(api.KindNetworkPolicy, "prod.broken") {
		t.Fatal("ClearUnreadable: the NetworkPolicy's deny was not there")
	}
	l.apply()
	l.expect("unreadable GlobalNetworkSet", drop("c", "e", "tcp", 8080), drop("a", "b", "tcp", 8080), drop("e", "a", "udp", 5353))
	if got := l.m.Unreadable(); len(got) != 1 || got[0].Scope != "all workload and host endpoints" {
		t.Fatalf("Unreadable() = %+v, want the GlobalNetworkSet's, of all workload and host endpoints", got)
	}

	if !l.m.ClearUnreadable(api.KindGlobalNetworkSet, "broken-set") {
		t.Fatal("ClearUnreadable: the GlobalNetworkSet's deny was not there")
	}
	if l.m.ClearUnreadable(api.KindGlobalNetworkSet, "broken-set") {
		t.Fatal("ClearUnreadable twice: a deny was cleared twice")
	}
	l.apply()
	l.expect("cleared", pass("a", "b", "tcp", 8080), pass("c", "a", "tcp", 8080), pass("c", "e", "tcp", 8080))
	if got := l.m.Unreadable(); len(got) != 0 {
		t.Fatalf("Unreadable() after clearing = %+v", got)
	}

	// What it cannot stand for is refused, not silently skipped.
	if err := l.m.SetUnreadable(api.KindHostEndpoint, "h", why); err == nil {
		t.Error("an unreadable HostEndpoint was accepted: no deny stands for it")
	}
}

// TestUnreadableDeniesHostEndpoints: a global kind's unreadable record
// (here a tier: the one that held the host's deny could be it) denies
// a host endpoint's traffic too, to and from the host and forwarded
// through it, but its failsafe ports; a NetworkPolicy's does not touch
// the host; cleared, the host's own policy is back. Packets decide.
func TestUnreadableDeniesHostEndpoints(t *testing.T) {
	h := newHostLab(t)
	h.load(`apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: host-open}
spec:
  selector: role == 'edge'
  applyOnForward: true
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`)
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"})
	open := []hp{hpass("x", "host", "tcp", 80), hpass("host", "x", "tcp", 80), hpass("x", "y", "tcp", 80)}
	h.expect("the host's policy allows", open...)

	why := errors.New("for the test")
	if err := h.m.SetUnreadable(api.KindNetworkPolicy, "prod.broken", why); err != nil {
		t.Fatal(err)
	}
	h.apply()
	h.expect("an unreadable NetworkPolicy leaves the host alone", open...)

	if err := h.m.SetUnreadable(api.KindTier, "security", why); err != nil {
		t.Fatal(err)
	}
	h.apply()
	h.expect("an unreadable Tier",
		hdrop("x", "host", "tcp", 80), hdrop("host", "x", "tcp", 80), hdrop("x", "y", "tcp", 80),
		hpass("x", "host", "tcp", 22), hpass("host", "x", "udp", 53), // failsafe
		hpass("y", "host", "tcp", 80)) // eth2 is no host endpoint

	h.m.ClearUnreadable(api.KindTier, "security")
	h.m.ClearUnreadable(api.KindNetworkPolicy, "prod.broken")
	h.apply()
	h.expect("cleared", open...)
}

// allowAllFirst is a tier of order 0 whose policy allows everything:
// a deny that goes before every tier must get past it.
func allowAllFirst() string {
	return `apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: first}
spec: {order: 0}
` + gnp("allow-all", `  tier: first
  order: 0
  selector: all()
  types: [Ingress, Egress]
  ingress: [{action: Allow}]
  egress: [{action: Allow}]`)
}
