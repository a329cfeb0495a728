package policy_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
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
	var ips []netip.Addr
	for _, v6 := range []bool{false, true} {
		ips = append(ips, h.x.NodeAddr(v6), h.y.NodeAddr(v6))
	}
	h.setHEP("node-by-ip", "", map[string]string{"role": "edge"}, ips, found, profiles...)
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

// setHEP sets one of this node's HostEndpoints (names no interface when
// iface is "": then found are the interfaces felix found).
func (h *hostLab) setHEP(name, iface string, labels map[string]string, ips []netip.Addr, found []string, profiles ...string) {
	h.t.Helper()
	he := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: name, Labels: labels},
		Spec: api.HostEndpointSpec{Node: "node", InterfaceName: iface, Profiles: profiles}}
	for _, a := range ips {
		he.Spec.ExpectedIPs = append(he.Spec.ExpectedIPs, a.String())
	}
	if err := he.Validate(); err != nil {
		h.t.Fatal(err)
	}
	if err := h.m.SetHostEndpoint(he, true, found...); err != nil {
		h.t.Fatal(err)
	}
	h.apply()
}

// TestHostEndpointByIPShadowedUntracked: an address-found endpoint
// shadowed on eth1 by a named one (sorting first) does not apply its
// doNotTrack policy to its addresses there: with a-eth1 (allow-all)
// governing eth1, b-byip's untracked Deny of TCP 80 leaves x's
// connections to the node's eth1 address answered, IPv4 and IPv6. Its
// guard once came after every dispatched interface, and a named
// interface without untracked policy had no raw rule, so the guard
// dropped them.
func TestHostEndpointByIPShadowedUntracked(t *testing.T) {
	h := newHostLab(t)
	h.load(`
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: untracked-deny}
spec:
  selector: role == 'edge'
  doNotTrack: true
  applyOnForward: true
  types: [Ingress]
  ingress: [{action: Deny, protocol: TCP, destination: {ports: [80]}}]
`)
	h.setHEP("a-eth1", "eth1", map[string]string{"role": "plain"}, nil, nil, api.DefaultAllowProfile)
	h.setHEP("b-byip", "", map[string]string{"role": "edge"}, []netip.Addr{h.x.NodeAddr(false), h.x.NodeAddr(true)}, []string{"eth1"})
	h.expect("b-byip shadowed on eth1", hpass("x", "host", "tcp", 80), hpass("x", "host", "tcp", 8080))
	// Not shadowed, its untracked Deny applies.
	h.m.DeleteHostEndpoint("a-eth1")
	h.apply()
	h.expect("b-byip governs eth1", hdrop("x", "host", "tcp", 80), hpass("x", "host", "tcp", 22))
}

// TestHostEndpointByIPAnyInterfaceIPv4: with no "*" endpoint, IPv4
// traffic to an address-found endpoint's address arriving on an
// interface no endpoint governs meets that endpoint (the kernel cannot
// tell it from a second interface holding the address); IPv6's stays
// unpoliced, as in Calico (its check is exact). With a "*" endpoint,
// that one keeps such traffic. Real TCP from y (behind eth2) to the
// node's eth1 addresses.
func TestHostEndpointByIPAnyInterfaceIPv4(t *testing.T) {
	h := newHostLab(t)
	h.setHEP("only-x", "", map[string]string{"role": "edge"}, []netip.Addr{h.x.NodeAddr(false), h.x.NodeAddr(true)}, []string{"eth1"})
	probe := func(why string, v6 bool, port int, want bool) {
		t.Helper()
		polab.Expect(t, h.y.NS, polab.Probe{Proto: "tcp", Dst: h.x.NodeAddr(v6), Port: port}, want, fmt.Sprintf("%s: y->eth1's address v6=%v", why, v6))
	}
	probe("no '*'", false, 80, false)
	probe("no '*'", false, 22, true)
	probe("no '*'", true, 80, true)
	h.expect("no '*': eth2's own", hpass("y", "host", "tcp", 80), hdrop("x", "host", "tcp", 80))

	h.setHEP("star", nftdp.WildcardIface, nil, nil, nil, api.DefaultAllowProfile)
	probe("'*' allows all", false, 80, true)
	probe("'*' allows all", true, 80, true)
	h.expect("'*': eth1 stays only-x's", hdrop("x", "host", "tcp", 80))
}
