package policy_test

import (
	"context"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

func gnp(name, extra string) string {
	return "\n---\napiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: " + name + "}\nspec:\n" + extra + "\n"
}

// TestTiersPass: a Pass in an earlier tier hands the packet to the next
// tier, a Deny there ends it, a tier that matches nothing drops unless
// its defaultAction is Pass.
func TestTiersPass(t *testing.T) {
	l := newLab(t)
	tier := func(action string) string {
		return "apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: security}\nspec: {order: 100, defaultAction: " + action + "}\n"
	}
	model := gnp("sec-b", `  tier: security
  selector: app == 'b'
  ingress: [{action: Pass, protocol: TCP, destination: {ports: [8080]}}, {action: Deny, protocol: TCP, destination: {ports: [9090]}}]`) +
		gnp("allow-b", `  selector: app == 'b'
  ingress: [{action: Allow, protocol: UDP}, {action: Allow, protocol: TCP}]`)
	l.load(tier("Deny") + model)
	l.apply()
	l.expect("tier end drops", append(append(both(pass("a", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090))...), both(drop("a", "b", "udp", 5353))...)...)
	l.load(tier("Pass"))
	l.apply()
	l.expect("tier end passes", append(append(both(pass("a", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090))...), both(pass("a", "b", "udp", 5353))...)...)
	// With no default-tier policy selecting b, what the security tier
	// passes falls to b's profile (which allows); what it denies stays
	// denied.
	l.loadOrDelete(gnp("allow-b", "  selector: app == 'b'"), true)
	l.apply()
	l.expect("after pass, profile", append(both(pass("a", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090))...)...)
}

// TestOrderTies: lower order first; equal orders go by name.
func TestOrderTies(t *testing.T) {
	l := newLab(t)
	allow := gnp("mm-allow", "  order: 10\n  selector: app == 'b'\n  ingress: [{action: Allow}]")
	deny := func(name, order string) string {
		return gnp(name, "  order: "+order+"\n  selector: app == 'b'\n  ingress: [{action: Deny, protocol: TCP, destination: {ports: [8080]}}]")
	}
	l.load(allow + deny("aa-deny", "10"))
	l.apply()
	l.expect("aa-deny before mm-allow", append(both(drop("a", "b", "tcp", 8080)), both(pass("a", "b", "tcp", 9090))...)...)
	l.loadOrDelete(deny("aa-deny", "10"), true)
	l.load(deny("zz-deny", "10"))
	l.apply()
	l.expect("mm-allow before zz-deny", both(pass("a", "b", "tcp", 8080))...)
	l.load(deny("zz-deny", "5"))
	l.apply()
	l.expect("order 5 before order 10", append(both(drop("a", "b", "tcp", 8080)), both(pass("a", "b", "tcp", 9090))...)...)
}

// TestNamespacesEgressAndSets: a NetworkPolicy's selectors see its own
// namespace; egress policy applies to pod->pod and pod->host; network
// sets are matched by label, global ones by global policies, namespaced
// ones by their namespace's policies.
func TestNamespacesEgressAndSets(t *testing.T) {
	l := newLab(t)
	np := `
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: np-b, namespace: prod}
spec:
  selector: app == 'b'
  ingress: [{action: Allow, source: {selector: team == 'x'}}]
`
	l.load(np)
	l.apply()
	l.expect("own namespace only", append(both(pass("a", "b", "tcp", 8080)), both(drop("c", "b", "tcp", 8080))...)...)
	l.loadOrDelete(np, true)

	egress := gnp("egress-a", "  selector: app == 'a'\n  types: [Egress]\n  egress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]")
	l.load(egress)
	l.apply()
	l.expect("egress", append(append(both(pass("a", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090))...),
		drop("a", "host", "tcp", 7070), pass("b", "a", "tcp", 9090), pass("b", "host", "tcp", 7070))...)
	l.loadOrDelete(egress, true)

	sets := `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: trusted-c, labels: {kind: trusted}}
spec: {nets: [10.65.0.3/32, "fd00:65::3/128"]}
---
apiVersion: projectcalico.org/v3
kind: NetworkSet
metadata: {name: trusted-d, namespace: prod, labels: {kind: trusted}}
spec: {nets: [10.65.0.4/32, "fd00:65::4/128"]}
`
	l.load(sets + gnp("from-trusted", "  selector: app == 'b'\n  ingress: [{action: Allow, source: {selector: kind == 'trusted'}}]"))
	l.apply()
	l.expect("global policy sees both sets", append(append(both(pass("c", "b", "tcp", 8080)), both(pass("d", "b", "tcp", 8080))...), both(drop("a", "b", "tcp", 8080))...)...)
	l.loadOrDelete(gnp("from-trusted", ""), true)
	l.load(`
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: from-trusted, namespace: prod}
spec:
  selector: app == 'b'
  ingress: [{action: Allow, source: {selector: kind == 'trusted'}}]
`)
	l.apply()
	l.expect("namespaced policy sees its namespace's set", append(both(pass("d", "b", "tcp", 8080)), both(drop("c", "b", "tcp", 8080))...)...)
	l.m.DeleteNetworkSet("prod", "trusted-d")
	l.apply()
	l.expect("set deleted", both(drop("d", "b", "tcp", 8080))...)
}

// TestDenyAllKeepsHostProbes: under a policy denying everything both
// ways, the node still reaches its pods (kubelet probes), and nothing
// else does; an interface felix has not programmed passes nothing until
// it is, and again nothing once its endpoint is gone. A restarted
// Manager with the same model adopts the tables without a write.
func TestDenyAllKeepsHostProbes(t *testing.T) {
	l := newLab(t)
	deny := gnp("deny-all", "  selector: all()\n  types: [Ingress, Egress]")
	l.load(deny)
	l.apply()
	l.expect("deny all", append(append(both(drop("a", "b", "tcp", 8080)), both(drop("a", "b", "icmp", 0))...),
		drop("b", "host", "tcp", 7070))...)
	l.expect("host probes", append(append(both(pass("host", "b", "tcp", 8080)), both(pass("host", "b", "icmp", 0))...), both(pass("host", "b", "udp", 5353))...)...)
	l.loadOrDelete(deny, true)
	l.apply()
	l.expect("deny-all removed", pass("b", "host", "tcp", 7070), pass("a", "b", "tcp", 8080))

	// Pod e is wired but not programmed.
	e := l.node.AddPod(t, "calie", "10.65.0.5", "fd00:65::5")
	l.pods["e"] = e
	for _, port := range []int{8080, 9090} {
		polab.Serve(t, e.NS, port)
	}
	l.expect("unprogrammed", append(both(drop("e", "a", "tcp", 8080)), both(drop("a", "e", "tcp", 8080))...)...)
	if err := l.m.SetEndpoint(policy.Endpoint{Key: "node-k8s-prod-e-eth0", Iface: "calie", Local: true, Namespace: "prod",
		Profiles: []string{"kns.prod"}, IPs: e.Prefixes()}); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.expect("programmed", append(both(pass("e", "a", "tcp", 8080)), both(pass("a", "e", "tcp", 8080))...)...)
	l.m.DeleteEndpoint("node-k8s-prod-e-eth0")
	l.apply()
	l.expect("endpoint gone", append(both(drop("e", "a", "tcp", 8080)), both(drop("a", "e", "tcp", 8080))...)...)

	// A restarted felix with the same model writes nothing.
	m2, err := policy.NewManager(policy.Config{Dataplane: nftdp.Config{NetnsFd: l.node.Fd}, Log: policy.LogConfig{Group: 7}})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	l.m = m2
	l.load(baseModel)
	for _, ep := range l.eps {
		if err := m2.SetEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	if err := m2.Apply(context.Background()); err != nil {
		t.Fatal(err)
	}
	if m2.Writes() != 0 {
		t.Errorf("restarted manager made %d writes for an unchanged model", m2.Writes())
	}
}
