package wireguard

import (
	"net"
	"net/netip"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// TestKickGreetsOnlyFirst: a new device with a new key greets only the
// peers it greets first (the lower public key of a pair); of two devices
// that learn each other at once exactly one initiates, the other leaves
// its keepalive as wanted (no simultaneous handshakes). With a key
// loaded from its file (a restart) it greets every peer.
func TestKickGreetsOnlyFirst(t *testing.T) {
	var keys []wgtypes.Key
	for range 3 {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.PublicKey())
	}
	own := keys[0]
	for _, peer := range keys[1:] {
		if GreetsFirst(own, peer) == GreetsFirst(peer, own) {
			t.Fatalf("GreetsFirst(%s, %s) == GreetsFirst(%s, %s): one end of a pair must greet first", own, peer, peer, own)
		}
	}
	if GreetsFirst(own, own) {
		t.Error("a key greets itself first")
	}
	cfg := wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: keys[1]}, {PublicKey: keys[2]}, {PublicKey: keys[1], Remove: true}}}
	any := kick(&cfg, own, false)
	greeted := 0
	for _, p := range cfg.Peers {
		kicked := p.PersistentKeepaliveInterval != nil
		if want := !p.Remove && GreetsFirst(own, p.PublicKey); kicked != want {
			t.Errorf("peer %s (remove %v): kicked %v, want %v", p.PublicKey, p.Remove, kicked, want)
		}
		if kicked {
			greeted++
		}
	}
	if any != (greeted > 0) {
		t.Errorf("kick reported %v with %d peers greeted", any, greeted)
	}
	// A key loaded from its file (a restart) greets every peer.
	cfg = wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: keys[1]}, {PublicKey: keys[2]}}}
	if !kick(&cfg, own, true) || cfg.Peers[0].PersistentKeepaliveInterval == nil || cfg.Peers[1].PersistentKeepaliveInterval == nil {
		t.Error("a restarted device (known key) must greet every peer at once")
	}
	// The other end of each pair kicks exactly the pairs this one does not.
	for _, peer := range keys[1:] {
		c := wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: own}}}
		if kick(&c, peer, false) == GreetsFirst(own, peer) {
			t.Errorf("both or neither of %s and %s greet", own, peer)
		}
	}
}

// TestKickRekeyedGreetsReplacedKeys: a peer added at the endpoint of a
// peer removed in the same change (that node's key replaced) is greeted;
// a peer at a new endpoint, a peer only updated and a removal are not.
func TestKickRekeyedGreetsReplacedKeys(t *testing.T) {
	var k [5]wgtypes.Key
	for i := range k {
		priv, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		k[i] = priv.PublicKey()
	}
	ep := func(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
	have := &wgtypes.Device{Peers: []wgtypes.Peer{
		{PublicKey: k[0], Endpoint: ep("192.0.2.1:51820")}, // rotates to k[2]
		{PublicKey: k[1], Endpoint: ep("192.0.2.2:51820")}, // updated in place
		{PublicKey: k[4], Endpoint: ep("192.0.2.9:51820")}, // removed
	}}
	mapped := &net.UDPAddr{IP: net.ParseIP("192.0.2.1").To16(), Port: 51820}
	cfg := wgtypes.Config{Peers: []wgtypes.PeerConfig{
		{PublicKey: k[0], Remove: true},
		{PublicKey: k[4], Remove: true},
		{PublicKey: k[1], Endpoint: ep("192.0.2.2:51820")},
		{PublicKey: k[2], Endpoint: mapped},
		{PublicKey: k[3], Endpoint: ep("192.0.2.3:51820")},
	}}
	if n := kickRekeyed(&cfg, have); n != 1 {
		t.Errorf("kickRekeyed greeted %d peers, want 1 (the replaced key)", n)
	}
	for _, p := range cfg.Peers {
		kicked := p.PersistentKeepaliveInterval != nil
		if want := p.PublicKey == k[2]; kicked != want {
			t.Errorf("peer %s (remove %v, endpoint %v): greeted %v, want %v", p.PublicKey, p.Remove, p.Endpoint, kicked, want)
		}
	}
	if n := kickRekeyed(&cfg, nil); n != 0 {
		t.Errorf("with nothing known, kickRekeyed greeted %d", n)
	}
}
