package policy_test

import (
	"context"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// byIP sets node-by-ip, this node's HostEndpoint found by its addresses
// on eth1 and eth2 (x's and y's side, IPv4 and IPv6), as felix gives it
// when both hold one.
func (h *hostLab) byIP(profiles ...string) { h.byIPFound([]string{"eth1", "eth2"}, profiles...) }

// byIPFound sets node-by-ip as felix gives it when it has found it on
// the interfaces given.
func (h *hostLab) byIPFound(found []string, profiles ...string) {
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
	if err := h.m.SetHostEndpoint(he, true, found...); err != nil {
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

// TestHostEndpointByIPBeforeFound: until felix has found the interface
// holding an endpoint's address (one just added or moved there), the
// kernel polices that address's own traffic on it: with node-by-ip
// found nowhere, a connection from x to the node's address on eth1 is
// dropped, and so is one from the node to x (its source is that
// address), the failsafe port stays open, and the rest of eth1's
// traffic (forwarded) waits for felix; a resync reads the guard back
// without a write; found on eth1 and eth2, the whole of both is
// governed.
func TestHostEndpointByIPBeforeFound(t *testing.T) {
	h := newHostLab(t)
	h.byIPFound(nil)
	h.expect("not found yet: its addresses are governed", hdrop("x", "host", "tcp", 80), hdrop("y", "host", "tcp", 80),
		hdrop("host", "x", "tcp", 80), hdrop("host", "y", "tcp", 80), hpass("x", "host", "tcp", 22), hpass("y", "host", "tcp", 22),
		hpass("x", "y", "tcp", 80), hpass("a", "host", "tcp", 80), hpass("host", "a", "tcp", 8080), hpass("lo", "lo", "tcp", 80))
	h.load(edgeForward)
	h.apply()
	h.expect("not found yet: forwarded traffic waits for felix", hpass("x", "y", "tcp", 80), hpass("x", "host", "tcp", 8080), hdrop("x", "host", "tcp", 80))
	// A full resync reads the guard back from the kernel as written.
	before := h.m.Writes()
	if err := h.m.Resync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if w := h.m.Writes() - before; w != 0 {
		t.Errorf("a resync with nothing changed wrote %d transactions, want 0", w)
	}
	h.byIPFound([]string{"eth1", "eth2"})
	h.expect("found", hdrop("x", "y", "tcp", 80), hpass("x", "y", "tcp", 8080), hpass("x", "host", "tcp", 8080), hdrop("x", "host", "tcp", 80))
}
