package wireguard

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

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

// TestKickRekeyedGreetsReplacedKeys: a peer added for the node or at the
// endpoint of a peer removed in the same change (that node's key
// replaced) is greeted
// when the removed peer had a handshake under this device's current
// key; when it had none since (this device's key may be new to the node
// too) only if this device greets first. A peer at a new endpoint, a
// peer only updated and a removal are not greeted.
func TestKickRekeyedGreetsReplacedKeys(t *testing.T) {
	var keys []wgtypes.Key
	for range 14 {
		priv, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, priv.PublicKey())
	}
	slices.SortFunc(keys, func(a, b wgtypes.Key) int { return bytes.Compare(a[:], b[:]) })
	// The lowest key greets every other first, the highest none.
	for _, own := range []wgtypes.Key{keys[0], keys[13]} {
		first := GreetsFirst(own, keys[5])
		k := keys[1:13]
		keyAt := time.Now().Add(-time.Minute)
		ep := func(s string) *net.UDPAddr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }
		have := &wgtypes.Device{Peers: []wgtypes.Peer{
			// Talked under the current key, replaced by k[2] (given IPv4-mapped).
			{PublicKey: k[0], Endpoint: ep("192.0.2.1:51820"), LastHandshakeTime: keyAt.Add(time.Second)},
			{PublicKey: k[1], Endpoint: ep("192.0.2.2:51820"), LastHandshakeTime: keyAt.Add(time.Second)}, // updated in place
			{PublicKey: k[4], Endpoint: ep("192.0.2.9:51820")},                                            // removed
			// Last handshake before this device's key: replaced by k[6].
			{PublicKey: k[5], Endpoint: ep("192.0.2.5:51820"), LastHandshakeTime: keyAt.Add(-time.Second)},
			// No handshake ever (the kernel's 1970): replaced by k[7].
			{PublicKey: k[3], Endpoint: ep("192.0.2.7:51820"), LastHandshakeTime: time.Unix(0, 0)},
			// Talked from another of its node's addresses (the device
			// roamed to it): replaced by k[9] for the same node.
			{PublicKey: k[8], Endpoint: ep("198.51.100.7:40000"), LastHandshakeTime: keyAt.Add(time.Second)},
			// Removed while another node joins: k[11] is not its node's.
			{PublicKey: k[10], Endpoint: ep("198.51.100.8:40000"), LastHandshakeTime: keyAt.Add(time.Second)},
		}}
		nodes := map[wgtypes.Key]string{k[8]: "roamer", k[9]: "roamer", k[10]: "gone", k[11]: "joining"}
		node := func(key wgtypes.Key) string { return nodes[key] }
		// What the device held when last configured: no handshakes yet.
		stale := &wgtypes.Device{}
		for _, p := range have.Peers {
			p.LastHandshakeTime = time.Time{}
			stale.Peers = append(stale.Peers, p)
		}
		mapped := &net.UDPAddr{IP: net.ParseIP("192.0.2.1").To16(), Port: 51820}
		cfg := wgtypes.Config{Peers: []wgtypes.PeerConfig{
			{PublicKey: k[0], Remove: true},
			{PublicKey: k[4], Remove: true},
			{PublicKey: k[5], Remove: true},
			{PublicKey: k[3], Remove: true},
			{PublicKey: k[1], Endpoint: ep("192.0.2.2:51820")},
			{PublicKey: k[2], Endpoint: mapped},
			{PublicKey: k[6], Endpoint: ep("192.0.2.5:51820")},
			{PublicKey: k[7], Endpoint: ep("192.0.2.7:51820")},
			{PublicKey: keys[5], Endpoint: ep("192.0.2.3:51820")}, // a new endpoint
			{PublicKey: k[8], Remove: true},
			{PublicKey: k[9], Endpoint: ep("192.0.2.8:51820")},
			{PublicKey: k[10], Remove: true},
			{PublicKey: k[11], Endpoint: ep("192.0.2.10:51820")},
		}}
		check := func(what string, node func(wgtypes.Key) string, want map[wgtypes.Key]bool) {
			t.Helper()
			c := wgtypes.Config{Peers: slices.Clone(cfg.Peers)}
			wantN := 0
			for _, w := range want {
				if w {
					wantN++
				}
			}
			if n := kickRekeyed(&c, stale, own, keyAt, func() (*wgtypes.Device, error) { return have, nil }, node); n != wantN {
				t.Errorf("own key greets first %v, %s: kickRekeyed greeted %d peers, want %d", first, what, n, wantN)
			}
			for _, p := range c.Peers {
				if kicked := p.PersistentKeepaliveInterval != nil; kicked != want[p.PublicKey] {
					t.Errorf("own key greets first %v, %s: peer %s (remove %v, endpoint %v): greeted %v, want %v", first, what, p.PublicKey, p.Remove, p.Endpoint, kicked, want[p.PublicKey])
				}
			}
		}
		check("nodes known", node, map[wgtypes.Key]bool{k[2]: true, k[6]: first, k[7]: first, k[9]: true})
		// Without nodes only endpoints match: k[9] is not recognised.
		check("endpoints only", nil, map[wgtypes.Key]bool{k[2]: true, k[6]: first, k[7]: first})
		if n := kickRekeyed(&cfg, nil, own, keyAt, nil, node); n != 0 {
			t.Errorf("with nothing known, kickRekeyed greeted %d", n)
		}
	}
}
