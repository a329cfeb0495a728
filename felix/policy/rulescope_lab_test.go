package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/pkg/api"
)

// Where a NetworkPolicy rule looks: the namespace a notSelector alone
// keeps, whose named ports a rule matches, and named ports without a
// protocol. Every verdict is real traffic through the lab node.

// expectPeer probes from a machine outside the cluster (no endpoint:
// the node only forwards its packets) and checks Explain agrees.
func (l *lab) expectPeer(why string, peer *polab.Peer, to, proto string, port int, want bool) {
	l.t.Helper()
	dst := l.pods[to].Addr(false)
	polab.Expect(l.t, peer.NS, polab.Probe{Proto: proto, Dst: dst, Port: port}, want, fmt.Sprintf("%s: outside %v->%s", why, peer.IPv4, to))
	f := policy.Flow{Src: peer.IPv4, Dst: dst, Proto: 6, DstPort: uint16(port), ICMPType: -1, ICMPCode: -1}
	if x := l.m.Explain(f); x.Ingress.Allowed != want {
		l.t.Errorf("%s: outside->%s: explain says allowed=%v (%+v), want %v", why, to, x.Ingress.Allowed, x.Ingress, want)
	}
}

// prodNP is a NetworkPolicy of namespace prod selecting sel in one
// direction (Ingress or Egress) with those rules (a YAML flow list).
func prodNP(name, sel, dir, rules string) string {
	return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: %s, namespace: prod}
spec:
  selector: %s
  types: [%s]
  %s: %s
`, name, sel, dir, strings.ToLower(dir), rules)
}

// A NetworkPolicy rule whose peer is given by notSelector alone matches
// the policy's namespace less those endpoints, as in Calico: never a
// pod of another namespace or an address outside the cluster (security
// review finding: it matched any address).
func TestNotSelectorAloneKeepsNamespace(t *testing.T) {
	l := newLab(t)
	peer := l.node.AddPeer(t, "ext0", 68)
	l.load(prodNP("only-not-a", "app == 'b'", "Ingress", "[{action: Allow, source: {notSelector: app == 'a'}}]") + "---\n" +
		prodNP("out-not-b", "app == 'a'", "Egress", "[{action: Allow, protocol: TCP, destination: {notSelector: app == 'b', ports: [8080]}}]"))
	l.apply()
	l.expect("ingress notSelector alone",
		pass("d", "b", "tcp", 8080), drop("a", "b", "tcp", 8080), drop("c", "b", "tcp", 8080))
	l.expectPeer("ingress notSelector alone", peer, "b", "tcp", 8080, false)
	l.expect("egress notSelector alone with ports",
		pass("a", "d", "tcp", 8080), drop("a", "b", "tcp", 8080), drop("a", "c", "tcp", 8080), drop("a", "d", "tcp", 9090))

	// Beside nets and notNets the namespace is still required: the
	// peer's net holds no endpoint of prod, and notNets leaving out d
	// leave no one of prod but a, whom the notSelector excludes.
	l.load(prodNP("only-not-a", "app == 'b'", "Ingress", `
  - {action: Allow, source: {notSelector: app == 'a', nets: [10.68.0.0/24]}}
  - {action: Allow, source: {notSelector: app == 'a', notNets: [10.65.0.4/32]}}`))
	l.apply()
	l.expect("notSelector beside nets",
		drop("a", "b", "tcp", 8080), drop("c", "b", "tcp", 8080), drop("d", "b", "tcp", 8080))
	l.expectPeer("notSelector beside nets", peer, "b", "tcp", 8080, false)
}

// Named ports of a NetworkPolicy rule without a positive selector are
// every endpoint's, whatever its namespace, as in Calico: denying port
// "metrics" denies c's in namespace dev too (security review finding:
// only the policy's namespace's were looked up, so a prod policy's Deny
// let a reach c's metrics port).
func TestNamedPortOfEveryNamespace(t *testing.T) {
	l := newLab(t)
	c := l.eps["c"]
	c.Ports = append(append([]policy.NamedPort{}, c.Ports...), policy.NamedPort{Name: "metrics", Proto: 6, Port: 9090})
	if err := l.m.SetEndpoint(c); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, egress string }{
		{"Deny of a named port", `[{action: Deny, protocol: TCP, destination: {ports: [metrics]}}, {action: Allow}]`},
		{"Allow of notPorts naming a port", `[{action: Allow, protocol: TCP, destination: {notPorts: [metrics]}}]`},
	} {
		l.load(prodNP("no-metrics", "app == 'a'", "Egress", tc.egress))
		l.apply()
		// b's 9090 is its port "web", not "metrics".
		l.expect(tc.name, drop("a", "c", "tcp", 9090), pass("a", "c", "tcp", 8080), pass("a", "b", "tcp", 9090))
	}
}

// A named port without a protocol matches on the protocol each endpoint
// gives the name, as in Calico (security review finding: felix refused
// the policy, which pkg/api accepts, so the pods it selected kept their
// allow-all profile and a Deny so written was never enforced).
func TestNamedPortWithoutProtocol(t *testing.T) {
	l := newLab(t)
	l.load(prodNP("web-only", "app == 'b'", "Ingress", "[{action: Allow, destination: {ports: [http, dns]}}]") + "---\n" +
		prodNP("no-web", "app == 'd'", "Egress", `
  - {action: Deny, destination: {ports: [web]}}
  - {action: Allow, destination: {notPorts: [http]}}`))
	l.apply()
	var ps []probe
	for _, p := range []probe{
		pass("a", "b", "tcp", 8080), pass("a", "b", "udp", 5353), // http is TCP, dns UDP
		drop("a", "b", "udp", 8080), drop("a", "b", "tcp", 5353), drop("a", "b", "tcp", 9090), drop("a", "b", "icmp", 0),
		drop("d", "b", "tcp", 9090), // b's web
		drop("d", "a", "tcp", 8080), // a's http
		pass("d", "a", "udp", 8080), pass("d", "c", "tcp", 9090), pass("d", "a", "icmp", 0),
	} {
		ps = append(ps, both(p)...)
	}
	l.expect("named ports without a protocol", ps...)
}

// A policy whose rules felix refuses denies everything in its
// directions for the pods it selects (fail closed), and replaces its
// previous version, instead of being left out: left out, the pods fell
// back to their allow-all profiles, and an edited policy's old version
// stayed in force until a restart dropped it.
func TestRefusedPolicyFailsClosed(t *testing.T) {
	l := newLab(t)
	set := func(y string) error {
		d, err := api.Decode([]byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return l.m.SetPolicyFailClosed(d.Resources[0].(api.Policy))
	}
	if err := set(prodNP("guard-b", "app == 'b'", "Ingress", "[{action: Allow, protocol: TCP, destination: {ports: [9090]}}]")); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.expect("valid version", pass("a", "b", "tcp", 9090), drop("a", "b", "tcp", 8080))
	// ICMP has no ports: felix refuses the rule (so does pkg/api).
	err := set(prodNP("guard-b", "app == 'b'", "Ingress", "[{action: Allow, protocol: ICMP, destination: {ports: [8080]}}]"))
	if !errors.Is(err, policy.ErrInvalid) || !strings.Contains(err.Error(), "spec.ingress[0].destination.ports[0]") {
		t.Fatalf("refusal %v: want ErrInvalid naming spec.ingress[0].destination.ports[0]", err)
	}
	l.apply()
	l.expect("refused version", drop("a", "b", "tcp", 9090), drop("a", "b", "tcp", 8080), drop("c", "b", "icmp", 0),
		pass("a", "d", "tcp", 8080), pass("b", "a", "tcp", 8080))
	if err := set(prodNP("guard-b", "app == 'b'", "Ingress", "[{action: Allow}]")); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.expect("fixed version", pass("a", "b", "tcp", 8080), pass("c", "b", "icmp", 0))
}
