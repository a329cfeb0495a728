package policy

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// stagedModel is a model with pods a (app=a) and b (app=b) in prod,
// whose namespace profile allows everything, c (app=c) in dev, and an
// enforced NetworkPolicy allow-b letting TCP 8080 into b.
func stagedModel(t *testing.T) *Calc {
	t.Helper()
	m := NewModel()
	d, err := api.Decode([]byte(`apiVersion: routed.io/v1
kind: Profile
metadata: {name: kns.prod}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: routed.io/v1
kind: Profile
metadata: {name: kns.dev}
spec: {ingress: [{action: Allow}], egress: [{action: Allow}]}
---
apiVersion: routed.io/v1
kind: NetworkPolicy
metadata: {name: allow-b, namespace: prod}
spec:
  order: 100
  selector: app == 'b'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		if err := m.SetResource(r); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range []struct{ name, ns string }{{"a", "prod"}, {"b", "prod"}, {"c", "dev"}} {
		m.SetEndpoint(Endpoint{Key: "ep-" + p.name, Node: "n1", Namespace: p.ns, Labels: map[string]string{"app": p.name},
			Profiles: []string{"kns." + p.ns}, IPs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 32)}})
	}
	return m
}

func tcpFlow(src, dst byte, port uint16) Flow {
	return Flow{Src: netip.AddrFrom4([4]byte{10, 0, 0, src}), Dst: netip.AddrFrom4([4]byte{10, 0, 0, dst}), Proto: 6, DstPort: port, ICMPType: -1, ICMPCode: -1}
}

// staged decodes one staged policy document as routedctl stores it and
// gives its model form.
func staged(t *testing.T, doc string) StagedPolicy {
	t.Helper()
	d, err := api.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	r := d.Resources[0]
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	s, ok := StagedFromAPI(r)
	if !ok {
		t.Fatalf("%T", r)
	}
	return s
}

// TestExplainStaged: a staged deny before an enforced allow denies
// under the staged model, named as the staged policy's rule with no
// kernel counter; a Set replaces its twin (its rules, not the twin's,
// decide); a Delete removes its twin (the profile decides again); a
// staged policy that applies to neither endpoint is left out; the
// enforced verdict and the model are unchanged afterwards.
func TestExplainStaged(t *testing.T) {
	m := stagedModel(t)
	f := tcpFlow(1, 2, 8080)
	enforced := m.Explain(f)
	if !enforced.Allowed() || enforced.Ingress.Rule.Policy != "np:prod/allow-b" {
		t.Fatalf("enforced: %+v", enforced)
	}
	denyAll := staged(t, `apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: deny-all}
spec: {order: 1, selector: all(), types: [Ingress, Egress], ingress: [{action: Deny}], egress: [{action: Log}, {action: Deny}]}
`)
	replace := staged(t, `apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: allow-b, namespace: prod}
spec: {order: 100, selector: app == 'b', ingress: [{action: Allow, protocol: TCP, destination: {ports: [9090]}}]}
`)
	remove := staged(t, `apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: allow-b, namespace: prod}
spec: {stagedAction: Delete}
`)
	elsewhere := staged(t, `apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: deny-c, namespace: dev}
spec: {selector: all(), ingress: [{action: Deny}]}
`)
	vs, err := m.ExplainStaged(f, enforced, []StagedPolicy{denyAll, replace, remove, elsewhere})
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 3 {
		t.Fatalf("want 3 staged verdicts (deny-c applies to neither pod), got %+v", vs)
	}

	d := vs[0]
	if d.Allowed || !d.Changed || d.Policy != "staged:sgnp:deny-all" || d.Twin != "gnp:deny-all" || d.TwinExists || d.Egress == nil || d.Ingress == nil {
		t.Fatalf("deny-all: %+v", d)
	}
	if r := d.Egress.Rule; d.Egress.Allowed || r.Kind != KindStagedPolicyRule || r.Policy != "staged:sgnp:deny-all" || r.Index != 1 || r.Action != "Deny" || r.ID != "" || r.Tier != "default" {
		t.Errorf("deny-all egress decided by %+v", r)
	}
	if len(d.Egress.Logged) != 1 || d.Egress.Logged[0].Kind != KindStagedPolicyRule || d.Egress.Logged[0].Index != 0 {
		t.Errorf("deny-all egress logged %+v", d.Egress.Logged)
	}
	if r := d.Ingress.Rule; d.Ingress.Allowed || r.Kind != KindStagedPolicyRule || r.Index != 0 {
		t.Errorf("deny-all ingress decided by %+v", r)
	}

	r := vs[1]
	if r.Allowed || !r.TwinExists || r.Twin != "np:prod/allow-b" || r.Egress != nil || r.Ingress == nil ||
		r.Ingress.Rule.Kind != KindTierEnd || r.Ingress.Rule.Tier != "default" {
		t.Errorf("replacing allow-b with an allow of 9090: %+v %+v", r, r.Ingress)
	}
	if v, err := m.ExplainStaged(tcpFlow(1, 2, 9090), m.Explain(tcpFlow(1, 2, 9090)), []StagedPolicy{replace}); err != nil || len(v) != 1 ||
		!v[0].Allowed || v[0].Ingress.Rule.Kind != KindStagedPolicyRule || v[0].Ingress.Rule.Policy != "staged:snp:prod/allow-b" {
		t.Errorf("the replacement's own rule allows 9090: %+v %v", v, err)
	}

	x := vs[2]
	if !x.Allowed || !x.Changed || x.Action != api.StagedActionDelete || x.Ingress == nil || x.Ingress.Rule.Kind != KindProfileRule || x.Ingress.Rule.Profile != "kns.prod" {
		t.Errorf("deleting allow-b: %+v %+v", x, x.Ingress)
	}

	if after := m.Explain(f); !reflect.DeepEqual(after, enforced) {
		t.Errorf("the model changed:\nbefore %+v\nafter  %+v", enforced, after)
	}
	if after := m.Explain(tcpFlow(1, 2, 9090)); after.Allowed() {
		t.Errorf("9090 is allowed after the staged replacement was evaluated: %+v", after)
	}
	if _, ok := m.policies["gnp:deny-all"]; ok {
		t.Error("the staged deny-all stayed in the model")
	}
}

// TestExplainStagedTogether: every staged policy applied at once (the
// staged deny-all, and allow-b replaced then removed) denies in both
// directions by the deny-all's rules; staged policies that concern
// neither pod give no verdict; one felix would refuse stops the
// evaluation; the model is unchanged afterwards.
func TestExplainStagedTogether(t *testing.T) {
	m := stagedModel(t)
	f := tcpFlow(1, 2, 8080)
	enforced := m.Explain(f)
	denyAll := staged(t, `apiVersion: routed.io/v1
kind: StagedGlobalNetworkPolicy
metadata: {name: deny-all}
spec: {order: 1, selector: all(), types: [Ingress, Egress], ingress: [{action: Deny}], egress: [{action: Deny}]}
`)
	replace := staged(t, `apiVersion: routed.io/v1
kind: StagedNetworkPolicy
metadata: {name: allow-b, namespace: prod}
spec: {selector: app == 'b', ingress: [{action: Allow, protocol: TCP, destination: {ports: [9090]}}]}
`)
	elsewhere := staged(t, `apiVersion: routed.io/v1
kind: StagedNetworkPolicy
metadata: {name: deny-c, namespace: dev}
spec: {selector: all(), ingress: [{action: Deny}]}
`)
	v, err := m.ExplainStagedTogether(f, enforced, []StagedPolicy{replace, denyAll, elsewhere})
	if err != nil || v == nil {
		t.Fatalf("%+v %v", v, err)
	}
	if v.Allowed || !v.Changed || v.Policy != "staged:*" || v.Egress == nil || v.Ingress == nil ||
		v.Egress.Rule.Policy != "staged:sgnp:deny-all" || v.Ingress.Rule.Policy != "staged:sgnp:deny-all" || v.Ingress.Rule.Kind != KindStagedPolicyRule {
		t.Errorf("together: %+v\negress %+v\ningress %+v", v, v.Egress, v.Ingress)
	}
	if v, err := m.ExplainStagedTogether(tcpFlow(1, 2, 9090), m.Explain(tcpFlow(1, 2, 9090)), []StagedPolicy{replace}); err != nil || v == nil ||
		!v.Allowed || v.Ingress.Rule.Policy != "staged:snp:prod/allow-b" || v.Egress.Rule.Profile != "kns.prod" {
		t.Errorf("the replacement alone, together: %+v %v", v, err)
	}
	if v, err := m.ExplainStagedTogether(f, enforced, []StagedPolicy{elsewhere}); v != nil || err != nil {
		t.Errorf("a staged policy of another namespace only: %+v %v", v, err)
	}
	bad := replace
	bad.Policy = &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "allow-b", Namespace: "prod"}, Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{Selector: "app =="}}}
	if v, err := m.ExplainStagedTogether(f, enforced, []StagedPolicy{denyAll, bad}); err != nil || v == nil || v.Error == "" || v.Ingress != nil {
		t.Errorf("with one felix would refuse: %+v %v", v, err)
	}
	if after := m.Explain(f); !reflect.DeepEqual(after, enforced) {
		t.Errorf("the model changed:\nbefore %+v\nafter  %+v", enforced, after)
	}
	if _, ok := m.policies["gnp:deny-all"]; ok {
		t.Error("the staged deny-all stayed in the model")
	}
	if _, err := NewCalc(newRecSink(), LogConfig{}).ExplainStagedTogether(f, enforced, nil); !errors.Is(err, ErrNotModel) {
		t.Errorf("a programming calculator: %v, want ErrNotModel", err)
	}
}

// TestExplainStagedRefusals: a staged policy felix would refuse is
// reported, not evaluated, and changes nothing; a calculator that
// programs a dataplane refuses to evaluate staged policies at all.
func TestExplainStagedRefusals(t *testing.T) {
	m := stagedModel(t)
	f := tcpFlow(1, 2, 8080)
	enforced := m.Explain(f)
	bad := StagedPolicy{Kind: api.KindStagedNetworkPolicy, Namespace: "prod", Name: "allow-b", Action: api.StagedActionSet,
		Policy: &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "allow-b", Namespace: "prod"}, Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{Selector: "app =="}}}}
	vs, err := m.ExplainStaged(f, enforced, []StagedPolicy{bad})
	if err != nil || len(vs) != 1 || vs[0].Error == "" || vs[0].Ingress != nil {
		t.Fatalf("a bad staged policy: %+v %v", vs, err)
	}
	if after := m.Explain(f); !reflect.DeepEqual(after, enforced) {
		t.Errorf("the model changed: %+v", after)
	}
	if vs, err := m.ExplainStaged(f, enforced, []StagedPolicy{{Kind: api.KindStagedNetworkPolicy, Name: "x"}}); err != nil || len(vs) != 1 || vs[0].Error == "" {
		t.Errorf("a staged policy without its twin: %+v %v", vs, err)
	}
	c := NewCalc(newRecSink(), LogConfig{})
	if _, err := c.ExplainStaged(f, enforced, []StagedPolicy{bad}); !errors.Is(err, ErrNotModel) {
		t.Errorf("a programming calculator: %v, want ErrNotModel", err)
	}
}

// TestExplainStagedServiceRule: a staged rule naming a Service matches
// the Service's endpoints as the controllers resolved them, as an
// enforced rule would: the staged deny of traffic from the Service's
// endpoints denies pod a (one of them), and not pod c (not one).
func TestExplainStagedServiceRule(t *testing.T) {
	m := stagedModel(t)
	if err := m.SetResource(&api.ServiceEndpoints{
		Metadata: api.ObjectMeta{Name: "front", Namespace: "prod", Annotations: map[string]string{api.ControllersOwnerAnnotation: api.ControllersOwnerValue}},
		Spec:     api.ServiceEndpointsSpec{Subsets: []api.ServiceSubset{{Addresses: []string{"10.0.0.1"}, Ports: []api.ServicePort{{Protocol: api.ProtocolFromName("TCP"), Port: 80}}}}},
	}); err != nil {
		t.Fatal(err)
	}
	deny := staged(t, `apiVersion: routed.io/v1
kind: StagedNetworkPolicy
metadata: {name: deny-front, namespace: prod}
spec: {order: 1, selector: app == 'b', ingress: [{action: Deny, source: {services: {name: front}}}]}
`)
	for _, c := range []struct {
		src     byte
		allowed bool
	}{{1, false}, {3, true}} {
		f := tcpFlow(c.src, 2, 8080)
		vs, err := m.ExplainStaged(f, m.Explain(f), []StagedPolicy{deny})
		if err != nil || len(vs) != 1 || vs[0].Error != "" || vs[0].Ingress == nil {
			t.Fatalf("from 10.0.0.%d: %+v %v", c.src, vs, err)
		}
		in := vs[0].Ingress
		if in.Allowed != c.allowed || (!c.allowed && in.Rule.Policy != "staged:snp:prod/deny-front") {
			t.Errorf("from 10.0.0.%d: ingress %+v, want allowed=%v", c.src, in, c.allowed)
		}
	}
}
