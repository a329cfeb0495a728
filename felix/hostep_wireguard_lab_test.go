package felix_test

import (
	"bytes"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
)

// uplinkPolicy is node-b's host endpoint on its uplink (eth0) and its
// policies: ingress TCP 8888 and 8889 allowed (7777 and the rest
// denied), egress TCP 7778 denied and the rest allowed, and a preDNAT
// Deny of TCP 8889 (which the normal policy allows: only the preDNAT
// chain can drop it).
const uplinkPolicy = `
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node-b-eth0, labels: {role: uplink}}
spec: {node: node-b, interfaceName: eth0}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: uplink}
spec:
  selector: role == 'uplink'
  types: [Ingress, Egress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8888, 8889]}}]
  egress:
  - {action: Deny, protocol: TCP, destination: {ports: [7778]}}
  - {action: Allow}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: uplink-prednat}
spec:
  selector: role == 'uplink'
  preDNAT: true
  applyOnForward: true
  ingress: [{action: Deny, protocol: TCP, destination: {ports: [8889]}}]
`

// connects dials addr over TCP from inside ns (a node's host or a pod)
// and reports whether the connection was made and echoes.
func connects(t *testing.T, ns *nstest.NS, addr string, timeout time.Duration) bool {
	t.Helper()
	var ok bool
	ns.Do(t, func() error {
		c, err := net.DialTimeout("tcp4", addr, timeout)
		if err != nil {
			return nil
		}
		defer c.Close()
		ok = exchange(c, 1) == nil
		return nil
	})
	return ok
}

// hepCase is one connection of the matrix and whether node-b's uplink
// host endpoint lets it through.
type hepCase struct {
	what  string
	from  *nstest.NS
	to    string
	allow bool
}

// checkHEP runs every case: an allowed one must connect within the
// deadline, a denied one must not connect (a drop: no answer within
// the dial's timeout).
func checkHEP(t *testing.T, phase string, cases []hepCase) {
	t.Helper()
	for _, c := range cases {
		if c.allow {
			nstest.Eventually(t, 10*time.Second, func() string {
				if !connects(t, c.from, c.to, 2*time.Second) {
					return fmt.Sprintf("%s: %s -> %s is not let through", phase, c.what, c.to)
				}
				return ""
			})
			continue
		}
		if connects(t, c.from, c.to, 1500*time.Millisecond) {
			t.Errorf("%s: %s -> %s connected; node-b's uplink host endpoint denies it", phase, c.what, c.to)
		}
	}
}

// TestHostEndpointUplinkPolicesWireguard (issue 40, finding 1): node-b
// has a HostEndpoint on its uplink eth0 whose policy allows TCP 8888
// and 8889 in, denies the rest in, denies TCP 7778 out, and a preDNAT
// policy denies 8889. With host encryption off (traffic on eth0) and on
// (the same traffic on wg.routed: the capture shows no clear payload on
// the uplink), every verdict is the same, with real TCP: node-a's host
// and node-a's pod are dropped at 7777 and (by preDNAT) 8889 and pass
// at 8888; node-b's host is dropped going out to node-a's 7778 and
// passes to its 7779. Without the host endpoint 7777 connects (the
// control that the drops are the endpoint's).
func TestHostEndpointUplinkPolicesWireguard(t *testing.T) {
	l := newWGLab(t, func(node string, c *felix.Config) {
		// One felix with policy: both share this process's nftables
		// set IDs (newWGLab).
		c.Features.DisablePolicy = node != "node-b"
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	for _, port := range []int{7777, 8888, 8889} {
		listenHost(t, b, port)
	}
	for _, port := range []int{7778, 7779} {
		listenHost(t, a, port)
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		if !connects(t, a.ns, "192.0.2.2:7777", 2*time.Second) {
			return "no host endpoint yet: node-a cannot reach node-b's 7777"
		}
		return ""
	})

	d, err := api.Decode([]byte(uplinkPolicy))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Resources {
		b.f.SetResource(r)
	}
	nstest.Eventually(t, 15*time.Second, func() string {
		if connects(t, a.ns, "192.0.2.2:7777", time.Second) {
			return "node-b's host endpoint is not programmed yet: node-a reaches its 7777"
		}
		return ""
	})
	cases := []hepCase{
		{"node-a's host", a.ns, "192.0.2.2:7777", false},
		{"node-a's host", a.ns, "192.0.2.2:8888", true},
		{"node-a's host (preDNAT deny)", a.ns, "192.0.2.2:8889", false},
		{"node-a's pod", a.podNS, "192.0.2.2:7777", false},
		{"node-a's pod", a.podNS, "192.0.2.2:8888", true},
		{"node-a's pod (preDNAT deny)", a.podNS, "192.0.2.2:8889", false},
		{"node-b's host (egress deny)", b.ns, "192.0.2.1:7778", false},
		{"node-b's host", b.ns, "192.0.2.1:7779", true},
	}
	checkHEP(t, "host encryption off", cases)

	began := time.Now()
	for _, n := range []*wgNode{a, b} {
		n.f.SetWireguardHostEncryption(true)
	}
	waitHostEncrypted(t, a, "node-b", true)
	waitHostEncrypted(t, b, "node-a", true)
	t.Logf("host encryption on: both nodes encrypt host traffic %v after it was turned on", time.Since(began).Round(time.Millisecond))

	// The traffic now crosses the devices: node-a's host payload to the
	// allowed port is not on the uplink in clear.
	stop := capture(t, a, "192.0.2.2")
	c := dialHost(t, a, "192.0.2.2:8888")
	err = exchange(c, 3)
	c.Close()
	if err != nil {
		t.Fatalf("host encryption on: node-a's host -> 8888: %v", err)
	}
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Fatalf("host encryption on, yet the host payload crossed the uplink in clear: the test would not prove the device is policed:\n%s", dumpPcap(t, pcap))
	}
	checkHEP(t, "host encryption on", cases)

	// Off again: the same verdicts.
	for _, n := range []*wgNode{a, b} {
		n.f.SetWireguardHostEncryption(false)
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		if r := hostRule(t, a) + hostRule(t, b); strings.TrimSpace(r) != "" {
			return "host traffic still routed through WireGuard: " + r
		}
		return ""
	})
	checkHEP(t, "host encryption off again", cases)
}
