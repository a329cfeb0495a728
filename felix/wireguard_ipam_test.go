package felix

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
)

// TestComputePlanWireguardForgedDeviceAddress is the security review's
// scenario: node b's record claims 10.3.2.5, inside c's block, as its
// WireGuard device address and 10.3.2.7 (also c's) as its VXLAN tunnel
// address; a keyless route reflector's record claims 10.3.2.6; a record
// claims an address IPAM lends to another node. None of them is routed
// through the device, held (blackholed) or in an allowed IP list, and
// each is refused naming node and address; c's own device address, in
// its block, and b's borrowed one still work. This node's own claim of
// a local pod's address, or of an address outside its blocks (an old
// IPAM GC freed it and another node got it), is refused too, so the
// device does not carry it (wgOwnAddr).
func TestComputePlanWireguardForgedDeviceAddress(t *testing.T) {
	cfg := wgTestConfig(t)
	node := func(name, ip, key, wg, vxlan string) *api.Node {
		n := wgAddrNode(name, ip, key, wg)
		n.Spec.IPv4VXLANTunnelAddr = vxlan
		return n
	}
	s := newState()
	s.seed([]api.Resource{
		testPool("p", "10.3.0.0/16", "Never", false, "all()"),
		node("a", "192.0.2.1/24", wgKey(t), "10.3.0.1", ""),
		node("b", "192.0.2.2/24", wgKey(t), "10.3.2.5", "10.3.2.7"), // forged: c's block
		node("c", "192.0.2.3/24", wgKey(t), "10.3.2.1", "10.3.2.2"), // legit
		node("rr", "192.0.2.9/24", "", "10.3.2.6", ""),              // keyless, forged
		node("e", "192.0.2.5/24", wgKey(t), "10.3.5.9", ""),         // lent to b, not e
		node("f", "192.0.2.6/24", wgKey(t), "10.3.5.8", ""),         // lent to f: legit
		testWEP("pod1", "a", "cali1", "10.3.0.5/32"),
	}, []BlockAffinity{
		{"a", pfx("10.3.0.0/26"), AffinityConfirmed},
		{"b", pfx("10.3.1.0/26"), AffinityConfirmed},
		{"c", pfx("10.3.2.0/26"), AffinityConfirmed},
		{"e", pfx("10.3.5.0/26"), AffinityConfirmed},
	})
	s.borrowed[pfx("10.3.5.0/26")] = map[netip.Addr]string{addr("10.3.5.9"): "b", addr("10.3.5.8"): "f"}
	s.wg.on, s.wg.ready = [2]bool{true, false}, [2]bool{true, false}
	s.wg.src[wg4] = addr("10.3.0.1")

	p := computePlan(&cfg, s)
	for _, forged := range []string{"10.3.2.5/32", "10.3.2.6/32", "10.3.2.7/32", "10.3.5.9/32"} {
		if r, ok := p.routes[pfx(forged)]; ok {
			t.Errorf("forged %s is routed: %+v", forged, r)
		}
		for name, peer := range p.wg[wg4].peers {
			if slices.Contains(peer.AllowedIPs, pfx(forged)) {
				t.Errorf("forged %s is among peer %s's allowed IPs %v", forged, name, peer.AllowedIPs)
			}
		}
	}
	wg := routetable.Route{Iface: wireguard.DeviceV4, Src: addr("10.3.0.1")}
	for _, legit := range []string{"10.3.2.1/32", "10.3.5.8/32"} {
		want := wg
		want.Dst = pfx(legit)
		if got := p.routes[pfx(legit)]; got != want {
			t.Errorf("legit %s = %+v, want %+v", legit, got, want)
		}
	}
	for name, want := range map[string][]netip.Prefix{
		"b": {pfx("10.3.1.0/26"), pfx("192.0.2.2/32")},
		"c": {pfx("10.3.2.0/26"), pfx("10.3.2.1/32"), pfx("10.3.2.2/32"), pfx("192.0.2.3/32")},
		"f": {pfx("10.3.5.8/32"), pfx("192.0.2.6/32")},
	} {
		if peer := p.wg[wg4].peers[name]; peer == nil || !slices.Equal(peer.AllowedIPs, want) {
			t.Errorf("peer %s: %+v, want allowed IPs %v", name, peer, want)
		}
	}
	for _, key := range []string{"b 10.3.2.5", "b 10.3.2.7", "rr 10.3.2.6", "e 10.3.5.9"} {
		if p.wg[wg4].refused[key] == "" {
			t.Errorf("%s not refused; refused: %v", key, p.wg[wg4].refused)
		}
	}
	if len(p.wg[wg4].refused) != 4 {
		t.Errorf("refused %v, want only the four forged claims", p.wg[wg4].refused)
	}

	l := &loop{cfg: &cfg, st: s}
	if got := l.wgOwnAddr(wg4); got != addr("10.3.0.1") {
		t.Errorf("own device address = %v, want 10.3.0.1", got)
	}
	for _, own := range []string{"10.3.0.5", "10.3.2.3", "10.3.5.8"} { // a local pod's; c's block; lent to f
		s.nodes["a"].Spec.Wireguard.InterfaceIPv4Address = own
		if got := l.wgOwnAddr(wg4); got.IsValid() {
			t.Errorf("own claim %s: device would carry %v", own, got)
		}
		if p := computePlan(&cfg, s); p.wg[wg4].refused["a "+own] == "" {
			t.Errorf("own claim %s not refused: %v", own, p.wg[wg4].refused)
		}
	}
}
