package policy_test

import "testing"

// TestPolicyOrderTieAcrossKinds (security review finding 6): policies
// of one tier and order run in Calico 3.32's order, by name, then
// namespace, then kind: GlobalNetworkPolicy r-deny before NetworkPolicy
// prod/s-allow (routed compared "r-deny" with "prod/s-allow" and let
// prod/s-allow allow first), t-deny after it, and of two policies named
// alike the global one (no namespace) first.
func TestPolicyOrderTieAcrossKinds(t *testing.T) {
	l := newLab(t)
	np := func(name, action string) string {
		return "\n---\napiVersion: projectcalico.org/v3\nkind: NetworkPolicy\nmetadata: {name: " + name + ", namespace: prod}\nspec:\n  order: 100\n  selector: app == 'b'\n  types: [Ingress]\n  ingress: [{action: " + action + "}]\n"
	}
	gp := func(name, action string) string {
		return gnp(name, "  order: 100\n  selector: app == 'b'\n  types: [Ingress]\n  ingress: [{action: "+action+"}]")
	}
	for _, tc := range []struct {
		name, docs string
		want       bool
	}{
		{"GNP r-deny, NP prod/s-allow", gp("r-deny", "Deny") + np("s-allow", "Allow"), false},
		{"NP prod/s-allow, GNP t-deny", gp("t-deny", "Deny") + np("s-allow", "Allow"), true},
		{"GNP same (deny), NP prod/same (allow)", gp("same", "Deny") + np("same", "Allow"), false},
		{"GNP same (allow), NP prod/same (deny)", gp("same", "Allow") + np("same", "Deny"), true},
	} {
		l.load(tc.docs)
		l.apply()
		p := drop("c", "b", "tcp", 8080)
		if tc.want {
			p = pass("c", "b", "tcp", 8080)
		}
		l.expect(tc.name, both(p)...)
		l.loadOrDelete(tc.docs, true)
	}
}
