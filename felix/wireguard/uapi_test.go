package wireguard

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func mustKey(t *testing.T) wgtypes.Key {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestUAPISetAndGet: the configuration felix sends renders in the
// cross-platform protocol's words, and a device's reply reads back into
// the same peers, handshakes and counters.
func TestUAPISetAndGet(t *testing.T) {
	priv, peer := mustKey(t), mustKey(t).PublicKey()
	port := 51820
	cfg := wgtypes.Config{PrivateKey: &priv, ListenPort: &port, Peers: []wgtypes.PeerConfig{
		{PublicKey: peer, Endpoint: net.UDPAddrFromAddrPort(netip.MustParseAddrPort("192.0.2.2:51820")),
			ReplaceAllowedIPs: true, AllowedIPs: ipNets([]netip.Prefix{netip.MustParsePrefix("10.244.1.0/26")})},
		{PublicKey: mustKey(t).PublicKey(), Remove: true},
	}}
	set := uapiSet(cfg)
	for _, want := range []string{"listen_port=51820\n", "endpoint=192.0.2.2:51820\n", "replace_allowed_ips=true\n", "allowed_ip=10.244.1.0/26\n", "remove=true\n"} {
		if !strings.Contains(set, want) {
			t.Errorf("set body lacks %q:\n%s", want, set)
		}
	}
	hexOf := func(k wgtypes.Key) string {
		return strings.TrimPrefix(uapiSet(wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: k, Remove: true}}}), "public_key=")[:64]
	}
	reply := "private_key=" + hexOf(priv) + "\nlisten_port=51820\npublic_key=" + hexOf(peer) +
		"\nendpoint=[fd00::2]:51821\nlast_handshake_time_sec=1700000000\nlast_handshake_time_nsec=5\nrx_bytes=10\ntx_bytes=20\n" +
		"persistent_keepalive_interval=0\nallowed_ip=fd00:244::40/122\nprotocol_version=1\nerrno=0\n"
	d, err := uapiGet("wg.routed", reply)
	if err != nil {
		t.Fatal(err)
	}
	if d.PrivateKey != priv || d.PublicKey != priv.PublicKey() || d.ListenPort != 51820 || len(d.Peers) != 1 {
		t.Fatalf("device read back wrong: %+v", d)
	}
	p := d.Peers[0]
	if p.PublicKey != peer || p.Endpoint.String() != "[fd00::2]:51821" || p.ReceiveBytes != 10 || p.TransmitBytes != 20 ||
		!p.LastHandshakeTime.Equal(time.Unix(1700000000, 5)) || len(p.AllowedIPs) != 1 || p.AllowedIPs[0].String() != "fd00:244::40/122" {
		t.Errorf("peer read back wrong: %+v", p)
	}
	if _, err := uapiGet("wg.routed", "errno=2\n"); err == nil {
		t.Error("an errno reply was taken for a device")
	}
}

// TestDiffPushesOnlyChanges: an unchanged device needs nothing; a new
// peer, a moved endpoint, changed allowed IPs, a gone peer and a new key
// each make one change.
func TestDiffPushesOnlyChanges(t *testing.T) {
	priv, pk := mustKey(t), mustKey(t).PublicKey()
	peer := Peer{Node: "b", PublicKey: pk, Endpoint: netip.MustParseAddrPort("192.0.2.2:51820"),
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/26"), netip.MustParsePrefix("192.0.2.2/32")}}
	want := Desired{Up: true, PrivateKey: priv, Port: 51820, Peers: map[wgtypes.Key]Peer{pk: peer}}
	have := &wgtypes.Device{PrivateKey: priv, ListenPort: 51820, Peers: []wgtypes.Peer{{PublicKey: pk,
		Endpoint: net.UDPAddrFromAddrPort(peer.Endpoint), AllowedIPs: ipNets([]netip.Prefix{peer.AllowedIPs[1], peer.AllowedIPs[0]})}}}
	if _, n := diff(have, want); n != 0 {
		t.Fatalf("in-sync device: %d changes", n)
	}
	moved := peer
	moved.Endpoint = netip.MustParseAddrPort("192.0.2.9:51820")
	want.Peers[pk] = moved
	if cfg, n := diff(have, want); n != 1 || !cfg.Peers[0].ReplaceAllowedIPs {
		t.Errorf("moved endpoint: %d changes %+v", n, cfg)
	}
	want.Peers = map[wgtypes.Key]Peer{}
	if cfg, n := diff(have, want); n != 1 || !cfg.Peers[0].Remove {
		t.Errorf("gone peer: %d changes %+v", n, cfg)
	}
	want.Peers[pk] = peer
	want.PrivateKey = mustKey(t)
	if cfg, n := diff(have, want); n != 1 || cfg.PrivateKey == nil || *cfg.PrivateKey != want.PrivateKey {
		t.Errorf("rotated key: %d changes %+v", n, cfg)
	}
}
