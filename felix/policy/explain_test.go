package policy_test

import (
	"testing"

	"github.com/routed-net/routed/felix/policy"
)

// TestExplainNamesRule: for an allow, a deny, a Pass through a tier to
// the next, a tier's default drop and a pod no policy selects (its
// profile's rule), Explain names the rule that decides each direction,
// agrees with the real probe, and that rule's kernel counter counted
// the probe.
func TestExplainNamesRule(t *testing.T) {
	l := newLab(t)
	l.load(`apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
` + gnp("sec-b", `  tier: security
  selector: app == 'b'
  types: [Ingress]
  ingress: [{action: Pass, protocol: TCP, destination: {ports: [8080]}}, {action: Deny, protocol: TCP, destination: {ports: [9090]}}, {action: Pass, protocol: ICMP}]`) +
		gnp("allow-b", `  selector: app == 'b'
  types: [Ingress]
  ingress: [{action: Log, protocol: TCP}, {action: Allow, protocol: TCP, destination: {ports: [8080]}}]`))
	l.apply()
	cases := []struct {
		name   string
		p      probe
		ruleID string
		kind   string
		tier   string
		passed string
		logged string
		egress string
	}{
		{"pass then allow", pass("a", "b", "tcp", 8080), "pi-gnp:allow-b/1", policy.KindPolicyRule, "default", "pi-gnp:sec-b/0", "pi-gnp:allow-b/0", "pro-kns.prod/0"},
		{"deny", drop("a", "b", "tcp", 9090), "pi-gnp:sec-b/1", policy.KindPolicyRule, "security", "", "", "pro-kns.prod/0"},
		{"tier default drop", drop("a", "b", "udp", 5353), "/tier-end/security", policy.KindTierEnd, "security", "", "", "pro-kns.prod/0"},
		{"pass then the next tier's end", drop("a", "b", "icmp", 0), "/tier-end/default", policy.KindTierEnd, "default", "pi-gnp:sec-b/2", "", "pro-kns.prod/0"},
		{"profile default", pass("a", "d", "tcp", 8080), "pri-kns.prod/0", policy.KindProfileRule, "", "", "", "pro-kns.prod/0"},
	}
	for _, tc := range cases {
		l.expect(tc.name, tc.p)
		x := l.m.Explain(l.flow(tc.p))
		in := x.Ingress
		if in.Endpoint != l.eps[tc.p.to].Key || x.Egress.Endpoint != l.eps[tc.p.from].Key {
			t.Errorf("%s: endpoints %q -> %q", tc.name, x.Egress.Endpoint, in.Endpoint)
		}
		if !hasSuffix(in.Rule.ID, tc.ruleID) || in.Rule.Kind != tc.kind || in.Rule.Tier != tc.tier {
			t.Errorf("%s: ingress decided by %+v, want %s (%s, tier %q)", tc.name, in.Rule, tc.ruleID, tc.kind, tc.tier)
		}
		if got := ids(in.Passed); got != tc.passed {
			t.Errorf("%s: passed by %q, want %q", tc.name, got, tc.passed)
		}
		if got := ids(in.Logged); got != tc.logged {
			t.Errorf("%s: logged by %q, want %q", tc.name, got, tc.logged)
		}
		if x.Egress.Rule.ID != tc.egress || !x.Egress.Allowed {
			t.Errorf("%s: egress %+v, want allowed by %s", tc.name, x.Egress.Rule, tc.egress)
		}
		cs, err := l.m.Counters()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{in.Rule.ID, x.Egress.Rule.ID} {
			if cs[id].Packets == 0 {
				t.Errorf("%s: the kernel counter of %s counted nothing (%+v)", tc.name, id, cs[id])
			}
		}
	}
	// A flow to an address that is no workload is not policed there.
	f := l.flow(pass("a", "b", "tcp", 8080))
	f.Dst = f.Dst.Next().Next().Next().Next().Next().Next()
	if x := l.m.Explain(f); x.Ingress.Policed || !x.Ingress.Allowed || x.Ingress.Rule.Kind != policy.KindNotPoliced {
		t.Errorf("to a non-workload: %+v", x.Ingress)
	}
}

func hasSuffix(s, suffix string) bool {
	return len(s) >= len(suffix) && s[len(s)-len(suffix):] == suffix
}

func ids(rs []policy.RuleInfo) string {
	out := ""
	for i, r := range rs {
		if i > 0 {
			out += ","
		}
		out += r.ID
	}
	return out
}
