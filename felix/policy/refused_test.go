package policy

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// denyingPolicy keeps the directions of the policy it stands for,
// whether its types are given or derived from which rule lists are
// empty, and denies in each.
func TestDenyingPolicyKeepsDirections(t *testing.T) {
	allow := []api.Rule{{Action: api.ActionAllow}}
	in, out := api.PolicyTypeIngress, api.PolicyTypeEgress
	for _, tc := range []struct {
		types           []api.PolicyType
		ingress, egress []api.Rule
		wantIn, wantOut bool
	}{
		{nil, nil, nil, true, false},
		{nil, allow, nil, true, false},
		{nil, nil, allow, false, true},
		{nil, allow, allow, true, true},
		{[]api.PolicyType{out}, nil, nil, false, true},
		{[]api.PolicyType{in, out}, allow, nil, true, true},
	} {
		p := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "x", Namespace: "prod"},
			Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{Selector: "all()", Types: tc.types, Ingress: tc.ingress, Egress: tc.egress}}}
		d, err := denyingPolicy(p)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := compilePolicy(d)
		if err != nil {
			t.Fatal(err)
		}
		if cp.hasIn != tc.wantIn || cp.hasOut != tc.wantOut {
			t.Errorf("types %v, %d ingress, %d egress rules: deny applies in=%v out=%v, want %v %v",
				tc.types, len(tc.ingress), len(tc.egress), cp.hasIn, cp.hasOut, tc.wantIn, tc.wantOut)
		}
		for _, rs := range [][]*rule{cp.ingress, cp.egress} {
			if len(rs) > 0 && (len(rs) != 1 || rs[0].action != api.ActionDeny || len(rs[0].sets()) != 0) {
				t.Errorf("types %v: rules %+v, want one plain Deny", tc.types, rs)
			}
		}
		if len(p.Spec.Ingress) != len(tc.ingress) || len(p.Spec.Egress) != len(tc.egress) {
			t.Error("denyingPolicy changed the policy it copied")
		}
	}
}
