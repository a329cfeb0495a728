package wireguard

import (
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
