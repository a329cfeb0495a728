package policy_test

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// byIP sets node-by-ip, this node's HostEndpoint found by its addresses
// on eth1 and eth2 (x's and y's side, IPv4 and IPv6), as felix gives it
// when both hold one.
func (h *hostLab) byIP(profiles ...string) {
	h.t.Helper()
	var ips []string
	for _, v6 := range []bool{false, true} {
		ips = append(ips, h.x.NodeAddr(v6).String(), h.y.NodeAddr(v6).String())
	}
	he := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: "node-by-ip", Labels: map[string]string{"role": "edge"}},
		Spec: api.HostEndpointSpec{Node: "node", ExpectedIPs: ips, Profiles: profiles}}
	if err := he.Validate(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.m.SetHostEndpoint(he, true, "eth1", "eth2"); err != nil {
		h.t.Fatal(err)
	}
	h.apply()
}

// TestHostEndpointByIPContexts: an endpoint found by address on two
// interfaces gets every context of a named one on each, with real
// traffic over IPv4 and IPv6 from both sides: failsafe ports open under
// its deny-all, applyOnForward policy on what it forwards between them,
// doNotTrack policy (no conntrack entry) and preDNAT policy.
func TestHostEndpointByIPContexts(t *testing.T) {
	h := newHostLab(t)
	h.byIP()
	h.expect("deny-all on both", hdrop("x", "host", "tcp", 80), hdrop("y", "host", "tcp", 80), hdrop("host", "x", "tcp", 80), hdrop("host", "y", "tcp", 80),
		hpass("x", "host", "tcp", 22), hpass("y", "host", "tcp", 22), hpass("host", "x", "udp", 53), hpass("host", "y", "udp", 53),
		hpass("x", "y", "tcp", 80), hpass("a", "host", "tcp", 80))

	h.load(edgeForward)
	h.apply()
	h.expect("applyOnForward on both", hpass("x", "y", "tcp", 8080), hdrop("x", "y", "tcp", 80), hpass("y", "x", "tcp", 8080), hdrop("y", "x", "tcp", 80),
		hpass("x", "host", "tcp", 8080), hpass("y", "host", "tcp", 8080), hdrop("y", "host", "tcp", 80))
	h.m.DeletePolicy("gnp:edge-forward")

	h.load(untrackedHTTP(true))
	h.apply()
	flushConntrack(t, h.node.NS)
	h.expect("doNotTrack on both", hpass("x", "host", "tcp", 80), hpass("y", "host", "tcp", 80), hdrop("x", "host", "tcp", 8080), hdrop("y", "host", "tcp", 8080))
	for port, n := range conntrackPorts(t, h.node.NS) {
		if port == "ipv4/80" || port == "ipv6/80" {
			t.Errorf("%d conntrack entries for %s, untracked on both interfaces", n, port)
		}
	}
	h.m.DeletePolicy("gnp:untracked-http")

	h.nodePort()
	h.byIP(api.DefaultAllowProfile)
	h.load(preDNATPolicy("Deny", 30080))
	h.apply()
	h.expect("preDNAT on both", hdrop("x", "host", "tcp", 30080), hdrop("y", "host", "tcp", 30080), hpass("x", "a", "tcp", 8080), hpass("y", "a", "tcp", 8080),
		hpass("y", "host", "tcp", 80))
}
