package felix

import (
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
)

// A Node record is its writer's claim: each test below has one node's
// record claim what is not its own, and checks that WireGuard neither
// hands that node another's traffic nor sends anyone's in clear.

func trustCfg(t *testing.T, allowClear bool) Config {
	t.Helper()
	cfg, err := Config{NodeName: "a", WireGuard: WireguardConfig{Enabled: true, AllowClear: allowClear}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func keyedNode(name, addr, key string) *api.Node {
	n := testNode(name, addr, "", nil)
	n.Status.WireguardPublicKey = key
	return n
}

// trustState is node a (this one) and node b with a block each, plus
// the nodes given; WireGuard on and ready.
func trustState(t *testing.T, extra ...*api.Node) *state {
	t.Helper()
	s := newState()
	res := []api.Resource{
		testPool("p", "10.3.0.0/16", "Never", false, "all()"),
		keyedNode("a", "192.0.2.1/24", wgKey(t)),
		keyedNode("b", "192.0.2.2/24", wgKey(t)),
	}
	for _, n := range extra {
		res = append(res, n)
	}
	s.seed(res, []BlockAffinity{
		{"a", pfx("10.3.0.0/26"), AffinityConfirmed},
		{"b", pfx("10.3.1.0/26"), AffinityConfirmed},
	})
	s.wg.on, s.wg.ready = [2]bool{true, false}, [2]bool{true, false}
	return s
}

// holders lists the peers whose allowed IPs hold dst.
func holders(p *plan, dst netip.Prefix) []string {
	var out []string
	for name, peer := range p.wg[wg4].peers {
		if slices.Contains(peer.AllowedIPs, dst) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestWireguardNodeAddressOfAPod: a Node whose address is a pod's (in
// b's block, or lent by IPAM to b) stays a peer without that address
// among its allowed IPs, and the pod's address stays b's; node
// addresses in a pool no block holds (a disabled pool over the node
// subnet, as Calico's no-NAT pools are) are the nodes' as before.
func TestWireguardNodeAddressOfAPod(t *testing.T) {
	cfg := trustCfg(t, false)
	s := trustState(t, keyedNode("z", "10.3.1.5/24", wgKey(t)), keyedNode("v", "10.3.2.9/24", wgKey(t)),
		keyedNode("u", "10.3.1.0/24", wgKey(t)), keyedNode("w", "10.3.3.7/24", wgKey(t)))
	s.seed([]api.Resource{testPool("nodes", "192.0.2.0/24", "Never", false, "all()")}, nil)
	s.affinities[affKey{node: "c", cidr: pfx("10.3.2.0/26")}] = BlockAffinity{"c", pfx("10.3.2.0/26"), AffinityConfirmed}
	s.borrowed[pfx("10.3.2.0/26")] = map[netip.Addr]string{addr("10.3.2.9"): "b"}
	// z's release of the block b holds now, not yet gone: b's counts.
	s.affinities[affKey{node: "z", cidr: pfx("10.3.1.0/26")}] = BlockAffinity{"z", pfx("10.3.1.0/26"), AffinityPendingDeletion}
	// w's address in w's own block (an IP reservation there).
	s.affinities[affKey{node: "w", cidr: pfx("10.3.3.0/26")}] = BlockAffinity{"w", pfx("10.3.3.0/26"), AffinityConfirmed}
	p := computePlan(&cfg, s)
	for node, want := range map[string]string{
		"z 10.3.1.5": "is a pod address: in block 10.3.1.0/26 of node b",
		"v 10.3.2.9": "is a pod address: lent by IPAM of node b",
		"u 10.3.1.0": "is a pod address: in block 10.3.1.0/26 of node b",
	} {
		if why := p.wg[wg4].refused[node]; !strings.Contains(why, want) {
			t.Errorf("refused[%s] = %q, want %q", node, why, want)
		}
	}
	for _, pod := range []string{"10.3.1.5/32", "10.3.2.9/32"} {
		if got := holders(p, pfx(pod)); len(got) > 1 || len(got) == 1 && got[0] != "b" {
			t.Errorf("%s (b's pod) in the allowed IPs of %v", pod, got)
		}
	}
	for _, n := range []string{"b", "z", "v"} {
		if p.wg[wg4].peers[n] == nil || p.wg[wg4].held[n] != "" {
			t.Errorf("%s is no peer (%v) or held: %q", n, p.wg[wg4].peers[n], p.wg[wg4].held[n])
		}
	}
	if got := holders(p, pfx("10.3.1.0/26")); !slices.Equal(got, []string{"b"}) {
		t.Errorf("b's block held by %v, want b", got)
	}
	if got := holders(p, pfx("192.0.2.2/32")); !slices.Equal(got, []string{"b"}) {
		t.Errorf("b's address (in the nodes' pool, in no block) held by %v, want b", got)
	}
	if got := holders(p, pfx("10.3.3.7/32")); !slices.Equal(got, []string{"w"}) {
		t.Errorf("w's address (in w's own block) held by %v, want w", got)
	}
	// The same on every plan: no map order decides it.
	for range 50 {
		if q := computePlan(&cfg, s); !maps.Equal(q.wg[wg4].refused, p.wg[wg4].refused) {
			t.Fatalf("refused %v, then %v", p.wg[wg4].refused, q.wg[wg4].refused)
		}
	}
	if p.wg[wg4].ownClaimed != "" {
		t.Errorf("ownClaimed %q, want none", p.wg[wg4].ownClaimed)
	}
	// This node's own address a pod's: others give it to no peer, so
	// its host traffic goes in clear.
	s.nodes["a"].Spec.BGP.IPv4Address = "10.3.1.7/24"
	if q := computePlan(&cfg, s); !strings.Contains(q.wg[wg4].ownClaimed, "10.3.1.7 is a pod address: in block 10.3.1.0/26 of node b") {
		t.Errorf("ownClaimed %q, want this node's address b's pod's", q.wg[wg4].ownClaimed)
	}
}

// TestWireguardSharedNodeAddress: two Node records with one address
// (a stale one, or a forged one) both stay peers, neither gets the
// address (the device would give it to the last one written and flip
// it on every Apply), and b's block, routed by IPAM, stays b's. A
// record claiming this node's own address does not get it either.
func TestWireguardSharedNodeAddress(t *testing.T) {
	cfg := trustCfg(t, false)
	s := trustState(t, keyedNode("z", "192.0.2.2/24", wgKey(t)), keyedNode("y", "192.0.2.1/24", wgKey(t)))
	s.learned[pfx("10.3.1.0/26")] = learnedRoute{nextHop: addr("192.0.2.2"), peer: addr("192.0.2.2")}
	p := computePlan(&cfg, s)
	if got := holders(p, pfx("192.0.2.2/32")); len(got) != 0 {
		t.Errorf("the shared address is in the allowed IPs of %v, want none", got)
	}
	for _, n := range []string{"b", "z"} {
		if why := p.wg[wg4].shared[n+" 192.0.2.2/32"]; !strings.Contains(why, "nodes b and z at once") {
			t.Errorf("shared[%s] = %q", n, why)
		}
	}
	if got := holders(p, pfx("192.0.2.1/32")); len(got) != 0 {
		t.Errorf("this node's address is in the allowed IPs of %v", got)
	}
	if got := holders(p, pfx("10.3.1.0/26")); !slices.Equal(got, []string{"b"}) {
		t.Errorf("b's block held by %v, want b", got)
	}
	if r := p.routes[pfx("10.3.1.0/26")]; r.Iface != wireguard.DeviceV4 {
		t.Errorf("b's block %+v, want through %s", r, wireguard.DeviceV4)
	}
	if len(p.wg[wg4].held) != 0 {
		t.Errorf("held %v, want none", p.wg[wg4].held)
	}
}

// TestWireguardRouteGoesToIPAMOwner: a route naming another node's
// address as the next hop of b's block, or of an address b borrowed,
// puts them in b's allowed IPs, not the other node's.
func TestWireguardRouteGoesToIPAMOwner(t *testing.T) {
	cfg := trustCfg(t, false)
	s := trustState(t, keyedNode("x", "192.0.2.3/24", wgKey(t)))
	s.affinities[affKey{node: "x", cidr: pfx("10.3.2.0/26")}] = BlockAffinity{"x", pfx("10.3.2.0/26"), AffinityConfirmed}
	s.learned[pfx("10.3.1.0/26")] = learnedRoute{nextHop: addr("192.0.2.3"), peer: addr("192.0.2.254")}
	s.learned[pfx("10.3.2.9/32")] = learnedRoute{nextHop: addr("192.0.2.3"), peer: addr("192.0.2.254")}
	s.borrowed[pfx("10.3.2.0/26")] = map[netip.Addr]string{addr("10.3.2.9"): "b"}
	// An address IPAM lends to this node: a local pod's, whatever a
	// route says.
	s.borrowed[pfx("10.3.1.0/26")] = map[netip.Addr]string{addr("10.3.1.9"): "a"}
	s.learned[pfx("10.3.1.9/32")] = learnedRoute{nextHop: addr("192.0.2.3"), peer: addr("192.0.2.254")}
	p := computePlan(&cfg, s)
	if got := holders(p, pfx("10.3.1.9/32")); len(got) != 0 {
		t.Errorf("this node's borrowed address is in the allowed IPs of %v", got)
	}
	if r, ok := p.routes[pfx("10.3.1.9/32")]; ok {
		t.Errorf("this node's borrowed address routed %+v, want left to its pod's own route", r)
	}
	if why, held := p.wg[wg4].held["a"]; held {
		t.Errorf("this node held: %q", why)
	}
	for _, dst := range []string{"10.3.1.0/26", "10.3.2.9/32"} {
		if got := holders(p, pfx(dst)); !slices.Equal(got, []string{"b"}) {
			t.Errorf("%s in the allowed IPs of %v, want b", dst, got)
		}
		if r := p.routes[pfx(dst)]; r.Iface != wireguard.DeviceV4 {
			t.Errorf("route %s = %+v, want through %s", dst, r, wireguard.DeviceV4)
		}
	}
}

// TestWireguardMalformedKeyHeld: a node that published a key that does
// not parse wants encryption: held, also where clear text to keyless
// nodes is allowed.
func TestWireguardMalformedKeyHeld(t *testing.T) {
	for _, allowClear := range []bool{false, true} {
		cfg := trustCfg(t, allowClear)
		s := trustState(t)
		s.nodes["b"].Status.WireguardPublicKey = "not-a-key"
		p := computePlan(&cfg, s)
		if why := p.wg[wg4].held["b"]; !strings.Contains(why, "does not parse") {
			t.Errorf("allowClear %v: b held for %q, want its key not parsing", allowClear, why)
		}
		if r := p.routes[pfx("10.3.1.0/26")]; r.Type != routetable.Blackhole {
			t.Errorf("allowClear %v: b's block %+v, want held", allowClear, r)
		}
	}
}

// TestWireguardSharedPrefixDropped: a prefix in two peers' allowed IPs
// is taken from both (the device would give it to the last one written
// and flip it on every Apply) and noted for each.
func TestWireguardSharedPrefixDropped(t *testing.T) {
	w := &wgPlan{shared: map[string]string{}, peers: map[string]*wireguard.Peer{
		"b": {Node: "b", AllowedIPs: []netip.Prefix{pfx("10.3.1.0/26"), pfx("192.0.2.2/32")}},
		"x": {Node: "x", AllowedIPs: []netip.Prefix{pfx("10.3.1.0/26"), pfx("192.0.2.3/32")}},
	}}
	w.dropShared()
	if got := w.peers["b"].AllowedIPs; !slices.Equal(got, []netip.Prefix{pfx("192.0.2.2/32")}) {
		t.Errorf("b's allowed IPs %v", got)
	}
	if got := w.peers["x"].AllowedIPs; !slices.Equal(got, []netip.Prefix{pfx("192.0.2.3/32")}) {
		t.Errorf("x's allowed IPs %v", got)
	}
	for _, n := range []string{"b", "x"} {
		if why := w.shared[n+" 10.3.1.0/26"]; !strings.Contains(why, "nodes b and x at once") {
			t.Errorf("shared[%s] = %q", n, why)
		}
	}
}

// TestWireguardSameMachineTwoNames: a node registered again under a new
// name, its old record left with the same key and address: its pods
// are reached through the one peer whichever name sorts first, not
// held; a record with the same key at another address is a clone and
// held.
func TestWireguardSameMachineTwoNames(t *testing.T) {
	cfg := trustCfg(t, false)
	s := trustState(t)
	kb := s.nodes["b"].Status.WireguardPublicKey
	s.seed([]api.Resource{keyedNode("aa-old-b", "192.0.2.2/24", kb), keyedNode("clone", "192.0.2.9/24", kb)}, nil)
	p := computePlan(&cfg, s)
	if why, held := p.wg[wg4].held["b"]; held {
		t.Errorf("b held: %q", why)
	}
	if got := holders(p, pfx("10.3.1.0/26")); !slices.Equal(got, []string{"aa-old-b"}) {
		t.Errorf("b's block in the allowed IPs of %v, want the one peer of b's key (aa-old-b's)", got)
	}
	if r := p.routes[pfx("10.3.1.0/26")]; r.Iface != wireguard.DeviceV4 {
		t.Errorf("b's block %+v, want through %s", r, wireguard.DeviceV4)
	}
	if why := p.wg[wg4].held["clone"]; !strings.Contains(why, "a cloned node") {
		t.Errorf("clone held for %q, want its cloned key", why)
	}
	if n := p.wg[wg4].byAddr[addr("192.0.2.2")]; n != "aa-old-b" {
		t.Errorf("192.0.2.2 is node %q's, want the peer's (aa-old-b)", n)
	}
}
