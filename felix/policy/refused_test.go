package policy

import (
	"errors"
	"net/netip"
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

// The explain model (routedctl policy explain, flow records) takes a
// refused policy as felix's dataplane does: a deny of what it selects.
func TestModelRefusedPolicyDenies(t *testing.T) {
	m := NewModel()
	d, err := api.Decode([]byte(`apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: kns.prod}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: guard-b, namespace: prod}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress: [{action: Allow, protocol: ICMP, destination: {ports: [8080]}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetResource(d.Resources[0]); err != nil {
		t.Fatal(err)
	}
	if err := m.SetResource(d.Resources[1]); !errors.Is(err, ErrInvalid) {
		t.Fatalf("refused policy: error %v, want ErrInvalid", err)
	}
	for i, app := range []string{"a", "b"} {
		m.SetEndpoint(Endpoint{Key: "ep-" + app, Node: "n1", Namespace: "prod", Labels: map[string]string{"app": app},
			Profiles: []string{"kns.prod"}, IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 32)}})
	}
	if x := m.Explain(tcpFlow(1, 2, 8080)); x.Ingress.Allowed || x.Ingress.Rule.Policy != "np:prod/guard-b" {
		t.Errorf("a -> b: ingress %+v, want denied by np:prod/guard-b", x.Ingress)
	}
	if x := m.Explain(tcpFlow(2, 1, 8080)); !x.Allowed() {
		t.Errorf("b -> a: %+v, want allowed (the policy has no egress)", x)
	}
}
