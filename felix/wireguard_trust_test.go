package felix

import (
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

// TestWireguardNodeAddressInPool: a Node whose address is a pod's (in
// b's block) is held, is no peer, and the pod's address stays b's.
func TestWireguardNodeAddressInPool(t *testing.T) {
	cfg := trustCfg(t, false)
	cfg.WireGuard.HostEncryption = true
	s := trustState(t, keyedNode("z", "10.3.1.5/24", wgKey(t)))
	p := computePlan(&cfg, s)
	if why := p.wg[wg4].held["z"]; !strings.Contains(why, "lies in IP pool 10.3.0.0/16") {
		t.Errorf("z held for %q, want its address in the pool", why)
	}
	if p.wg[wg4].peers["z"] != nil {
		t.Errorf("z is a peer: %+v", p.wg[wg4].peers["z"])
	}
	if got := holders(p, pfx("10.3.1.5/32")); len(got) != 0 {
		t.Errorf("10.3.1.5/32 (b's pod) in the allowed IPs of %v", got)
	}
	if got := holders(p, pfx("10.3.1.0/26")); !slices.Equal(got, []string{"b"}) {
		t.Errorf("b's block held by %v, want b", got)
	}
}

// TestWireguardSharedNodeAddress: two Node records with one address
// are both held, and b's block, routed by b's address, is held with
// them: not given to the other, not sent in clear. A record claiming
// this node's own address is held too.
func TestWireguardSharedNodeAddress(t *testing.T) {
	for _, allowClear := range []bool{false, true} {
		cfg := trustCfg(t, allowClear)
		s := trustState(t, keyedNode("z", "192.0.2.2/24", wgKey(t)), keyedNode("y", "192.0.2.1/24", wgKey(t)))
		s.learned[pfx("10.3.1.0/26")] = learnedRoute{nextHop: addr("192.0.2.2"), peer: addr("192.0.2.2")}
		p := computePlan(&cfg, s)
		for _, n := range []string{"b", "z"} {
			if why := p.wg[wg4].held[n]; !strings.Contains(why, "192.0.2.2 is also claimed by node") {
				t.Errorf("allowClear %v: %s held for %q, want its shared address", allowClear, n, why)
			}
		}
		if why := p.wg[wg4].held["y"]; !strings.Contains(why, "also claimed by node a") {
			t.Errorf("allowClear %v: y (a's address) held for %q", allowClear, why)
		}
		if len(p.wg[wg4].peers) != 0 {
			t.Errorf("allowClear %v: peers %v, want none", allowClear, p.wg[wg4].peers)
		}
		if r := p.routes[pfx("10.3.1.0/26")]; r.Type != routetable.Blackhole {
			t.Errorf("allowClear %v: b's block %+v, want held", allowClear, r)
		}
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
	p := computePlan(&cfg, s)
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
