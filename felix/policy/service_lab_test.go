package policy_test

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// setService gives the lab's Manager a ServiceEndpoints record of
// namespace prod: addresses are pod names (both of its addresses),
// ports "tcp/8080"-style.
func (l *lab) setService(name string, pods []string, ports ...api.ServicePort) {
	l.t.Helper()
	sub := api.ServiceSubset{Ports: ports}
	for _, p := range pods {
		sub.Addresses = append(sub.Addresses, l.pods[p].IPv4.String(), l.pods[p].IPv6.String())
	}
	r := &api.ServiceEndpoints{Metadata: api.ObjectMeta{Name: name, Namespace: "prod"}}
	if len(pods) > 0 {
		r.Spec.Subsets = []api.ServiceSubset{sub}
	}
	if err := l.m.SetServiceEndpoints(r); err != nil {
		l.t.Fatal(err)
	}
	l.apply()
}

// counter is a rule's packet count in the kernel (both families).
func (l *lab) counter(id string) uint64 {
	l.t.Helper()
	cs, err := l.m.Counters()
	if err != nil {
		l.t.Fatal(err)
	}
	return cs[id].Packets
}

func tcpPort(n uint16) api.ServicePort {
	return api.ServicePort{Name: "p", Protocol: api.Protocol{Name: "TCP"}, Port: n}
}

func udpPort(n uint16) api.ServicePort {
	return api.ServicePort{Name: "u", Protocol: api.Protocol{Name: "UDP"}, Port: n}
}

// probes joins probe lists (each over both families).
func probes(ps ...probe) []probe {
	var out []probe
	for _, p := range ps {
		out = append(out, both(p)...)
	}
	return out
}

// TestServiceRuleIngress: b admits only the endpoints of Service
// "front" (their addresses, any port), with real TCP over IPv4 and
// IPv6: nothing before the Service has a record (fail closed), its
// endpoint's traffic once it has, another pod's once the endpoints
// change to it (set elements only: the rule's kernel counter is not
// reset, as a rewritten chain's would be), nobody's once the record is
// gone; Explain agrees with every probe.
func TestServiceRuleIngress(t *testing.T) {
	l := newLab(t)
	l.load(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: from-front, namespace: prod}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress: [{action: Allow, source: {services: {name: front}}}]
`)
	l.apply()
	l.expect("no record yet", probes(drop("a", "b", "tcp", 8080), drop("d", "b", "tcp", 8080))...)

	l.setService("front", []string{"a"}, tcpPort(8080))
	l.expect("front is a", probes(pass("a", "b", "tcp", 8080), pass("a", "b", "tcp", 9090), drop("d", "b", "tcp", 8080))...)

	// The endpoints change: set elements only. A rewritten chain would
	// have its rules made again, their counters from zero.
	const rule = "pi-np:prod/from-front/0"
	before := l.counter(rule)
	if before == 0 {
		t.Fatalf("%s counted nothing for the probes it allowed", rule)
	}
	l.setService("front", []string{"d"}, tcpPort(8080))
	if after := l.counter(rule); after < before {
		t.Errorf("%s went from %d to %d packets: the endpoints' change rewrote the chain", rule, before, after)
	}
	l.expect("front moved to d", probes(drop("a", "b", "tcp", 8080), pass("d", "b", "tcp", 8080))...)

	l.m.DeleteServiceEndpoints("prod", "front")
	l.apply()
	l.expect("record gone", probes(drop("a", "b", "tcp", 8080), drop("d", "b", "tcp", 8080))...)
}

// TestServiceRuleEgress: a may send only to the endpoints of Service
// "back" on the Service's ports (address, protocol and port together),
// with real TCP and UDP over IPv4 and IPv6: the Service's address and
// port pass, the same address on another port and another address on
// the same port are dropped; the endpoints change (an address removed,
// one added with a UDP port), then the Service has none (nothing
// passes); Explain agrees with every probe.
func TestServiceRuleEgress(t *testing.T) {
	l := newLab(t)
	l.load(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: to-back, namespace: prod}
spec:
  selector: app == 'a'
  types: [Egress]
  egress: [{action: Allow, destination: {services: {name: back}}}]
`)
	l.apply()
	l.expect("no record yet", probes(drop("a", "b", "tcp", 8080))...)

	l.setService("back", []string{"b"}, tcpPort(8080))
	l.expect("back is b:8080", probes(
		pass("a", "b", "tcp", 8080),
		drop("a", "b", "tcp", 9090), // same address, another port
		drop("a", "b", "udp", 8080), // same address and port number, another protocol
		drop("a", "d", "tcp", 8080), // another address, the same port
	)...)

	l.setService("back", []string{"d"}, tcpPort(8080), udpPort(5353))
	l.expect("back moved to d", probes(
		drop("a", "b", "tcp", 8080), // address removed
		pass("a", "d", "tcp", 8080),
		pass("a", "d", "udp", 5353),
		drop("a", "d", "tcp", 5353),
	)...)

	l.setService("back", nil)
	l.expect("back has no endpoints", probes(drop("a", "d", "tcp", 8080), drop("a", "d", "udp", 5353))...)
}
