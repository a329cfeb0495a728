package felix

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
)

func wgKey(t *testing.T) string {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey().String()
}

// TestComputePlanWireguard: with WireGuard on and ready, other nodes'
// blocks and the addresses they borrowed (learned over BGP) go dev
// wg.routed, and each peer's allowed IPs are exactly
// those plus its node and VXLAN tunnel addresses; a route to a router
// is left alone; a node without a key or with another's key is held; a
// device not ready holds every node; AllowClear routes a keyless node
// as without WireGuard.
func TestComputePlanWireguard(t *testing.T) {
	cfg, err := Config{NodeName: "a", WireGuard: WireguardConfig{Enabled: true}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	kb := wgKey(t)
	s := newState()
	nodeWithKey := func(name, addr, key string) *api.Node {
		n := testNode(name, addr, "", nil)
		n.Status.WireguardPublicKey = key
		return n
	}
	b := nodeWithKey("b", "192.0.2.2/24", kb)
	b.Spec.IPv4VXLANTunnelAddr = "10.9.0.2"
	s.seed([]api.Resource{
		testPool("p", "10.3.0.0/16", "Always", false, "all()"),
		nodeWithKey("a", "192.0.2.1/24", wgKey(t)),
		b,
		nodeWithKey("c", "192.0.2.3/24", ""),
		nodeWithKey("d", "192.0.2.4/24", kb), // the same key as b: a clone
	}, []BlockAffinity{
		{"a", pfx("10.3.0.0/26"), AffinityConfirmed},
		{"b", pfx("10.3.1.0/26"), AffinityConfirmed},
		{"c", pfx("10.3.2.0/26"), AffinityConfirmed},
		{"d", pfx("10.3.3.0/26"), AffinityConfirmed},
	})
	s.learned[pfx("10.3.2.9/32")] = learnedRoute{nextHop: addr("192.0.2.2"), peer: addr("192.0.2.2")} // borrowed by b from c's block
	s.learned[pfx("172.16.0.0/16")] = learnedRoute{nextHop: addr("192.0.2.254"), peer: addr("192.0.2.254")}
	s.borrowed[pfx("10.3.2.0/26")] = map[netip.Addr]string{addr("10.3.2.9"): "b"}
	// b's VXLAN tunnel address: IPAM lends it to b (wireguard_ipam.go).
	s.borrowed[pfx("10.9.0.0/26")] = map[netip.Addr]string{addr("10.9.0.2"): "b"}
	s.wg.on, s.wg.ready = [2]bool{true, false}, [2]bool{true, false}

	p := computePlan(&cfg, s)
	wg := routetable.Route{Iface: wireguard.DeviceV4}
	for dst, want := range map[string]routetable.Route{
		"10.3.1.0/26":   wg,
		"10.3.2.9/32":   wg,
		"10.3.2.0/26":   {Type: routetable.Blackhole},
		"10.3.3.0/26":   {Type: routetable.Blackhole},
		"10.3.0.0/26":   {Type: routetable.Blackhole}, // this node's own block
		"10.3.0.0/16":   {Type: routetable.Blackhole}, // the pool: pod traffic nothing else routes
		"172.16.0.0/16": {Gw: addr("192.0.2.254")},    // a router's: not WireGuard's
	} {
		want.Dst = pfx(dst)
		if got := p.routes[pfx(dst)]; got != want {
			t.Errorf("route %s = %+v, want %+v", dst, got, want)
		}
	}
	peer := p.wg[wg4].peers["b"]
	if peer == nil {
		t.Fatal("no peer for b")
	}
	wantIPs := []netip.Prefix{pfx("10.3.1.0/26"), pfx("10.3.2.9/32"), pfx("10.9.0.2/32"), pfx("192.0.2.2/32")}
	if !slices.Equal(peer.AllowedIPs, wantIPs) || peer.Endpoint.String() != "192.0.2.2:51820" {
		t.Errorf("peer b: endpoint %s allowed %v, want 192.0.2.2:51820 %v", peer.Endpoint, peer.AllowedIPs, wantIPs)
	}
	if len(p.wg[wg4].peers) != 1 {
		t.Errorf("peers %v, want b only", p.wg[wg4].peers)
	}
	if !strings.Contains(p.wg[wg4].held["c"], "no WireGuard key") || !strings.Contains(p.wg[wg4].held["d"], "also b's") {
		t.Errorf("held = %v, want c (no key) and d (b's key)", p.wg[wg4].held)
	}

	s.wg.ready[wg4] = false
	p = computePlan(&cfg, s)
	if r := p.routes[pfx("10.3.1.0/26")]; r.Type != routetable.Blackhole || !strings.Contains(p.wg[wg4].held["b"], "not ready") {
		t.Errorf("device not ready: route %+v held %v, want b held", r, p.wg[wg4].held)
	}

	s.wg.ready[wg4] = true
	cfg.WireGuard.AllowClear = true
	p = computePlan(&cfg, s)
	if r := p.routes[pfx("10.3.2.0/26")]; r.Iface != TunnelDevice || r.Gw != addr("192.0.2.3") {
		t.Errorf("allowClear: c's block %+v, want via 192.0.2.3 over tunl0 as without WireGuard", r)
	}
	if _, held := p.wg[wg4].held["c"]; held {
		t.Error("allowClear: c still held")
	}
}

// TestWireguardConfigRefused: each bad setting is refused naming it.
func TestWireguardConfigRefused(t *testing.T) {
	for _, c := range []struct {
		cfg  WireguardConfig
		want string
	}{
		{WireguardConfig{Port: 70000}, "port 70000"},
		{WireguardConfig{Enabled: true, EnabledV6: true, Port: 5000, PortV6: 5000}, "both on port 5000"},
		{WireguardConfig{MTU: 500}, "MTU 500"},
		{WireguardConfig{Mode: "fast"}, `mode "fast"`},
	} {
		_, err := Config{NodeName: "a", WireGuard: c.cfg}.withDefaults()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error with %q", c.cfg, err, c.want)
		}
	}
	// Host encryption is honoured now (wireguard_host.go), with or
	// without a family on (FelixConfiguration may turn one on later).
	if _, err := (Config{NodeName: "a", WireGuard: WireguardConfig{HostEncryption: true}}).withDefaults(); err != nil {
		t.Errorf("host encryption refused: %v", err)
	}
}
