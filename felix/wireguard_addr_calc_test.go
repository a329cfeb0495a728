package felix

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/felix/wireguard"
	"github.com/routed-net/routed/pkg/api"
)

// TestComputePlanWireguardDeviceAddresses: with this node's device
// carrying its address, routes through the device take it as their
// source; every other node's device address is routed through the
// device (also one IPAM lends it outside its blocks) and is in its peer's allowed
// IPs; a held node's is held; before the device carries an address the
// routes have no source (the kernel refuses a source it does not have).
func TestComputePlanWireguardDeviceAddresses(t *testing.T) {
	cfg := wgTestConfig(t)
	s := newState()
	node := wgAddrNode
	s.seed([]api.Resource{
		testPool("p", "10.3.0.0/16", "Never", false, "all()"),
		node("a", "192.0.2.1/24", wgKey(t), "10.3.0.1"),
		node("b", "192.0.2.2/24", wgKey(t), "10.3.1.1"),
		node("c", "192.0.2.3/24", wgKey(t), "10.3.9.7"), // from a block that is not c's
		node("d", "192.0.2.4/24", "", "10.3.3.1"),       // no key: held
	}, []BlockAffinity{
		{"a", pfx("10.3.0.0/26"), AffinityConfirmed},
		{"b", pfx("10.3.1.0/26"), AffinityConfirmed},
		{"c", pfx("10.3.2.0/26"), AffinityConfirmed},
		{"d", pfx("10.3.3.0/26"), AffinityConfirmed},
	})
	// c's address comes from a block of no node's: IPAM lends it to c.
	s.borrowed[pfx("10.3.9.0/26")] = map[netip.Addr]string{addr("10.3.9.7"): "c"}
	s.wg.on, s.wg.ready = [2]bool{true, false}, [2]bool{true, false}
	s.wg.src[wg4] = addr("10.3.0.1")

	p := computePlan(&cfg, s)
	wg := routetable.Route{Iface: wireguard.DeviceV4, Src: addr("10.3.0.1")}
	for dst, want := range map[string]routetable.Route{
		"10.3.1.0/26": wg,
		"10.3.1.1/32": wg,
		"10.3.2.0/26": wg,
		"10.3.9.7/32": wg,
		"10.3.3.0/26": {Type: routetable.Blackhole},
		"10.3.3.1/32": {Type: routetable.Blackhole},
	} {
		want.Dst = pfx(dst)
		if got := p.routes[pfx(dst)]; got != want {
			t.Errorf("route %s = %+v, want %+v", dst, got, want)
		}
	}
	for name, want := range map[string][]netip.Prefix{
		"b": {pfx("10.3.1.0/26"), pfx("10.3.1.1/32"), pfx("192.0.2.2/32")},
		"c": {pfx("10.3.2.0/26"), pfx("10.3.9.7/32"), pfx("192.0.2.3/32")},
	} {
		if peer := p.wg[wg4].peers[name]; peer == nil || !slices.Equal(peer.AllowedIPs, want) {
			t.Errorf("peer %s: %+v, want allowed IPs %v", name, peer, want)
		}
	}

	s.wg.src[wg4] = netip.Addr{}
	p = computePlan(&cfg, s)
	if r := p.routes[pfx("10.3.1.0/26")]; r.Src.IsValid() || r.Iface != wireguard.DeviceV4 {
		t.Errorf("no device address yet: %+v, want through the device without a source", r)
	}
}

// wgTestConfig is node a's configuration with WireGuard on.
func wgTestConfig(t *testing.T) Config {
	t.Helper()
	cfg, err := Config{NodeName: "a", WireGuard: WireguardConfig{Enabled: true}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// wgAddrNode is a node with a WireGuard key (none: "") and device address.
func wgAddrNode(name, ip, key, wg string) *api.Node {
	n := testNode(name, ip, "", nil)
	n.Status.WireguardPublicKey = key
	n.Spec.Wireguard = &api.NodeWireguardSpec{InterfaceIPv4Address: wg}
	return n
}
