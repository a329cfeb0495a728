package wireguard

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// recorder is an impl that records what is written to it; failAt > 0
// fails that write (counted from 1) once.
type recorder struct {
	writes []wgtypes.Config
	failAt int
}

func (r *recorder) configure(c wgtypes.Config) error {
	if r.failAt > 0 && len(r.writes)+1 == r.failAt {
		r.failAt = 0
		return errors.New("recorder: refused")
	}
	r.writes = append(r.writes, c)
	return nil
}
func (r *recorder) read() (*wgtypes.Device, error) { return &wgtypes.Device{}, nil }
func (r *recorder) close() error                   { return nil }
func (r *recorder) kind() string                   { return "recorder" }

// TestRegreetRemakesPeer: a peer Regreet asks for is removed, then added
// back as wanted with a 1 s keepalive (which starts a handshake at
// once), then given its wanted keepalive, in three separate writes; a
// peer no longer wanted is forgotten; nothing is written twice.
func TestRegreetRemakesPeer(t *testing.T) {
	p, gone := testPublicKey(t), testPublicKey(t)
	r := &recorder{}
	d := &Device{Name: "wg.test", dev: r, log: log}
	d.want.Peers = map[wgtypes.Key]Peer{p: {Node: "node-b", PublicKey: p, Endpoint: netip.MustParseAddrPort("192.0.2.2:51820"),
		AllowedIPs: []netip.Prefix{netip.MustParsePrefix("192.0.2.2/32")}, Keepalive: 3 * time.Second}}
	d.Regreet(p)
	d.Regreet(gone)
	if err := d.applyRegreets(); err != nil {
		t.Fatal(err)
	}
	if len(r.writes) != 3 {
		t.Fatalf("%d writes, want 3 (remove, add greeting, keepalive back): %+v", len(r.writes), r.writes)
	}
	rm, add, back := r.writes[0].Peers, r.writes[1].Peers, r.writes[2].Peers
	if len(rm) != 1 || rm[0].PublicKey != p || !rm[0].Remove {
		t.Errorf("first write %+v, want only the removal of %s", rm, p)
	}
	if len(add) != 1 || add[0].Remove || add[0].UpdateOnly || add[0].PersistentKeepaliveInterval == nil || *add[0].PersistentKeepaliveInterval != time.Second ||
		add[0].Endpoint == nil || add[0].Endpoint.String() != "192.0.2.2:51820" || len(add[0].AllowedIPs) != 1 || !add[0].ReplaceAllowedIPs {
		t.Errorf("second write %+v, want %s added with its endpoint, allowed IPs and a 1 s keepalive", add, p)
	}
	if len(back) != 1 || !back[0].UpdateOnly || back[0].PersistentKeepaliveInterval == nil || *back[0].PersistentKeepaliveInterval != 3*time.Second {
		t.Errorf("third write %+v, want %s's keepalive back to 3s", back, p)
	}
	r.writes = nil
	if err := d.applyRegreets(); err != nil || len(r.writes) != 0 {
		t.Errorf("a second Apply wrote %+v (%v): each Regreet is done once", r.writes, err)
	}

	// A write that fails keeps the request for the next Apply.
	d.Regreet(p)
	r.writes, r.failAt = nil, 2
	if err := d.applyRegreets(); err == nil {
		t.Fatal("a refused write returned no error")
	}
	r.writes = nil
	if err := d.applyRegreets(); err != nil || len(r.writes) != 3 {
		t.Errorf("after a refused write, the next Apply wrote %d times (%v), want the 3 writes again", len(r.writes), err)
	}
}
