package policy_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/ctl"
)

// stagedDenyAll stages a deny of everything in each staged kind: a
// global one ahead of every policy of the default tier, one for
// namespace prod, and a Kubernetes deny-all (no rules in either
// direction) for prod.
const stagedDenyAll = `apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: deny-all}
spec: {order: 1, selector: all(), types: [Ingress, Egress], ingress: [{action: Deny}], egress: [{action: Deny}]}
---
apiVersion: projectcalico.org/v3
kind: StagedNetworkPolicy
metadata: {name: deny-prod, namespace: prod}
spec: {order: 2, selector: all(), types: [Ingress], ingress: [{action: Deny}]}
---
apiVersion: projectcalico.org/v3
kind: StagedKubernetesNetworkPolicy
metadata: {name: default-deny, namespace: prod}
spec: {podSelector: {}, policyTypes: [Ingress, Egress]}
`

// TestStagedNeverEnforced: with a staged deny-all of each kind beside
// an enforced allow, real connections the enforced policy allows still
// go through (IPv4 and IPv6), what it denies is still denied, and a pod
// no enforced policy selects is still reachable: felix takes none of the
// staged kinds from the feed (felix.PolicyKinds) and none of them is a
// Policy its Manager could be given. The model, built from the same
// documents, says what the staged policies would have done: denied,
// each by its own rule, or for the Kubernetes one by the default tier's
// end.
func TestStagedNeverEnforced(t *testing.T) {
	l := newLab(t)
	allow := gnp("allow-b", `  order: 100
  selector: app == 'b'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]`)
	l.load(allow)
	d, err := api.Decode([]byte(stagedDenyAll))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		if slices.Contains(felix.PolicyKinds, r.GetKind()) || r.GetKind() == api.KindWorkloadEndpoint {
			t.Fatalf("felix subscribes to %s: it would enforce staged policies", r.GetKind())
		}
		if _, ok := r.(api.Policy); ok {
			t.Fatalf("%s is an api.Policy: the policy dataplane would take it", r.GetKind())
		}
	}
	l.apply()
	for _, p := range [][]probe{both(pass("a", "b", "tcp", 8080)), both(pass("a", "d", "tcp", 9090)), both(pass("b", "c", "udp", 5353)), both(drop("a", "b", "tcp", 9090))} {
		l.expect("enforced verdicts under staged deny-alls", p...)
	}

	m := policy.NewModel()
	base, err := api.Decode([]byte(baseModel + allow))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range base.Resources {
		if err := m.SetResource(r); err != nil {
			t.Fatal(err)
		}
	}
	for _, ep := range l.eps {
		// As a pod's WorkloadEndpoint gives it (EndpointFromAPI): the
		// converted Kubernetes policy selects pods by it.
		labels := maps.Clone(ep.Labels)
		labels[api.LabelOrchestrator] = "k8s"
		ep.Local, ep.Labels = false, labels
		m.SetEndpoint(ep)
	}
	for _, v6 := range []bool{false, true} {
		p := pass("a", "b", "tcp", 8080)
		p.v6 = v6
		f := l.flow(p)
		x := m.Explain(f)
		if !x.Allowed() || x.Ingress.Rule.Policy != "gnp:allow-b" {
			t.Fatalf("model, enforced: %+v", x)
		}
		staged, notes, err := ctl.StagedForModel(d.Resources)
		if err != nil || len(notes) > 0 {
			t.Fatalf("staged policies for the model: %v %v", err, notes)
		}
		vs, err := m.ExplainStaged(f, x, staged)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) != 3 {
			t.Fatalf("v6=%v: want a staged verdict from each staged policy, got %+v", v6, vs)
		}
		// The Kubernetes deny-all is converted at order 1000, after the
		// enforced allow (order 100): b's ingress is still allowed, and
		// a's egress, which nothing allows, ends at the default tier.
		want := []struct {
			policy      string
			decides     func(policy.StagedVerdict) *policy.Decision
			kind, by    string
			ingressOpen bool
		}{
			{"staged:sgnp:deny-all", ingressOf, policy.KindStagedPolicyRule, "staged:sgnp:deny-all", false},
			{"staged:snp:prod/deny-prod", ingressOf, policy.KindStagedPolicyRule, "staged:snp:prod/deny-prod", false},
			{"staged:sknp:prod/default-deny", egressOf, policy.KindTierEnd, "", true},
		}
		for i, w := range want {
			v := vs[i]
			d := w.decides(v)
			if v.Policy != w.policy || v.Allowed || !v.Changed || d == nil || d.Allowed || d.Rule.Kind != w.kind || d.Rule.Policy != w.by {
				t.Errorf("v6=%v: %s: %+v (deciding %+v)", v6, w.policy, v, d)
			}
			if open := v.Ingress != nil && v.Ingress.Allowed; open != w.ingressOpen {
				t.Errorf("v6=%v: %s: ingress %+v", v6, w.policy, v.Ingress)
			}
		}
	}
	// After all that, still what the kernel does.
	l.expect("enforced verdicts after explaining staged policies", both(pass("a", "b", "tcp", 8080))...)
}

func ingressOf(v policy.StagedVerdict) *policy.Decision { return v.Ingress }
func egressOf(v policy.StagedVerdict) *policy.Decision  { return v.Egress }
