package policy_test

import (
	"strings"
	"testing"
)

// gnpOnB is a GlobalNetworkPolicy in the default tier selecting pod b,
// with the given ingress rules (YAML flow list).
func gnpOnB(name, ingress string) string {
	return `
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: ` + name + `}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress: ` + ingress + "\n"
}

// TestRuleFields proves every rule field and action with a packet that
// passes and one that is dropped, over IPv4 and IPv6 where the field
// applies to both. Each case is a policy on b's ingress.
func TestRuleFields(t *testing.T) {
	l := newLab(t)
	withSrc := func(p probe, port int) probe { p.srcPort = port; return p }
	cases := []struct {
		name   string
		rules  string
		probes []probe
		v4only bool
	}{
		{"protocol name", `[{action: Allow, protocol: TCP}]`, []probe{pass("a", "b", "tcp", 8080), drop("a", "b", "udp", 8080)}, false},
		{"protocol number", `[{action: Allow, protocol: 17}]`, []probe{pass("a", "b", "udp", 5353), drop("a", "b", "tcp", 8080)}, false},
		{"notProtocol", `[{action: Allow, notProtocol: TCP}]`, []probe{pass("a", "b", "udp", 8080), drop("a", "b", "tcp", 8080)}, false},
		{"icmp type and code", `[{action: Allow, protocol: ICMP, icmp: {type: 8, code: 0}}, {action: Allow, protocol: ICMPv6, icmp: {type: 128, code: 0}}]`,
			[]probe{pass("a", "b", "icmp", 0), drop("a", "b", "tcp", 8080)}, false},
		{"notICMP", `[{action: Deny, protocol: ICMP, notICMP: {type: 0}}, {action: Deny, protocol: ICMPv6, notICMP: {type: 129}}, {action: Allow}]`,
			[]probe{drop("a", "b", "icmp", 0), pass("a", "b", "tcp", 8080)}, false},
		{"ipVersion", `[{action: Allow, ipVersion: 4}]`, []probe{pass("a", "b", "tcp", 8080), {from: "a", to: "b", proto: "tcp", port: 8080, v6: true}}, true},
		{"source nets", `[{action: Allow, source: {nets: [10.65.0.1/32, "fd00:65::1/128"]}}]`, []probe{pass("a", "b", "tcp", 8080), drop("c", "b", "tcp", 8080)}, false},
		{"source notNets", `[{action: Allow, source: {notNets: [10.65.0.0/31, "fd00:65::/127"]}}]`, []probe{pass("c", "b", "tcp", 8080), drop("a", "b", "tcp", 8080)}, false},
		{"destination nets (one family)", `[{action: Allow, destination: {nets: [10.65.0.2/32]}}]`,
			[]probe{pass("a", "b", "tcp", 8080), {from: "a", to: "b", proto: "tcp", port: 8080, v6: true}}, true},
		{"source selector", `[{action: Allow, source: {selector: app == 'a'}}]`, []probe{pass("a", "b", "tcp", 8080), drop("c", "b", "tcp", 8080)}, false},
		{"source notSelector", `[{action: Allow, source: {notSelector: app == 'a'}}]`, []probe{pass("c", "b", "tcp", 8080), drop("a", "b", "tcp", 8080)}, false},
		{"global selector spans namespaces", `[{action: Allow, source: {selector: team == 'x'}}]`, []probe{pass("a", "b", "tcp", 8080), pass("c", "b", "tcp", 8080), drop("d", "b", "tcp", 8080)}, false},
		{"namespaceSelector", `[{action: Allow, source: {namespaceSelector: env == 'dev'}}]`, []probe{pass("c", "b", "tcp", 8080), drop("a", "b", "tcp", 8080)}, false},
		{"serviceAccounts names", `[{action: Allow, source: {serviceAccounts: {names: [sa-a]}}}]`, []probe{pass("a", "b", "tcp", 8080), drop("c", "b", "tcp", 8080)}, false},
		{"serviceAccounts selector", `[{action: Allow, source: {serviceAccounts: {selector: role == 'frontend'}}}]`, []probe{pass("a", "b", "tcp", 8080), drop("c", "b", "tcp", 8080)}, false},
		{"destination port", `[{action: Allow, protocol: TCP, destination: {ports: [8080]}}]`, []probe{pass("a", "b", "tcp", 8080), drop("a", "b", "tcp", 9090)}, false},
		{"destination port range", `[{action: Allow, protocol: TCP, destination: {ports: ["9000:9100"]}}]`, []probe{pass("a", "b", "tcp", 9090), drop("a", "b", "tcp", 8080)}, false},
		{"destination ports list", `[{action: Allow, protocol: UDP, destination: {ports: [1, 5353, "9000:9100"]}}]`, []probe{pass("a", "b", "udp", 5353), drop("a", "b", "udp", 8080)}, false},
		{"destination notPorts", `[{action: Allow, protocol: TCP, destination: {notPorts: [8080]}}]`, []probe{pass("a", "b", "tcp", 9090), drop("a", "b", "tcp", 8080)}, false},
		{"source port", `[{action: Allow, protocol: TCP, source: {ports: [40001]}}]`,
			[]probe{withSrc(pass("a", "b", "tcp", 8080), 40001), withSrc(drop("a", "b", "tcp", 8080), 40002)}, false},
		{"named port", `[{action: Allow, protocol: TCP, destination: {ports: [web]}}]`, []probe{pass("a", "b", "tcp", 9090), drop("a", "b", "tcp", 8080)}, false},
		{"named and numeric ports", `[{action: Allow, protocol: UDP, destination: {ports: [dns, 9090]}}]`,
			[]probe{pass("a", "b", "udp", 5353), pass("a", "b", "udp", 9090), drop("a", "b", "udp", 8080)}, false},
		{"named notPorts", `[{action: Allow, protocol: TCP, destination: {notPorts: [web]}}]`, []probe{pass("a", "b", "tcp", 8080), drop("a", "b", "tcp", 9090)}, false},
		{"deny before allow", `[{action: Deny, protocol: TCP, destination: {ports: [9090]}}, {action: Allow}]`, []probe{pass("a", "b", "tcp", 8080), drop("a", "b", "tcp", 9090)}, false},
		{"log goes on", `[{action: Log}, {action: Allow, protocol: TCP}]`, []probe{pass("a", "b", "tcp", 8080), drop("a", "b", "udp", 8080)}, false},
	}
	for _, tc := range cases {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			l.t = t
			y := gnpOnB("case", tc.rules)
			l.load(y)
			l.apply()
			for _, p := range tc.probes {
				if tc.v4only {
					l.expect(tc.name, p)
					continue
				}
				l.expect(tc.name, both(p)...)
			}
			// Each rule counts what it matched: the first rule saw the
			// passing probes of both families at least.
			cs, err := l.m.Counters()
			if err != nil {
				t.Fatal(err)
			}
			if c := cs["pi-gnp:case/0"]; c.Packets == 0 || c.Bytes == 0 {
				t.Errorf("rule 0 counter %+v, want packets and bytes", c)
			}
			l.loadOrDelete(y, true)
			l.apply()
		})
	}
}
