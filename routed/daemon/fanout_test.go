package daemon

import (
	"fmt"
	"net/netip"
	"testing"
)

type borrowSink struct{ snapshots, blocks int }

func (b *borrowSink) OnBorrowedSnapshot(map[netip.Prefix]map[netip.Addr]string) { b.snapshots++ }
func (b *borrowSink) OnBorrowedBlock(netip.Prefix, map[netip.Addr]string)       { b.blocks++ }

type borrowedSpeaker struct{ got []string }

func (s *borrowedSpeaker) SetBorrowedIPs(a []netip.Addr) { s.got = append(s.got, fmt.Sprint(a)) }

// TestBorrowFanout: felix gets every block's borrowed addresses, the
// speaker only this node's, and only when they change.
func TestBorrowFanout(t *testing.T) {
	fx, sp := &borrowSink{}, &borrowedSpeaker{}
	f := &borrowFanout{node: "me", felix: fx, speaker: sp}
	b1, b2 := netip.MustParsePrefix("10.1.0.0/26"), netip.MustParsePrefix("10.1.0.64/26")
	a := netip.MustParseAddr
	f.OnBorrowedSnapshot(map[netip.Prefix]map[netip.Addr]string{
		b1: {a("10.1.0.9"): "me", a("10.1.0.3"): "other"},
	})
	f.OnBorrowedBlock(b2, map[netip.Addr]string{a("10.1.0.70"): "other"}) // not ours
	f.OnBorrowedBlock(b2, map[netip.Addr]string{a("10.1.0.70"): "other", a("10.1.0.65"): "me"})
	f.OnBorrowedBlock(b1, nil)
	want := []string{"[10.1.0.9]", "[10.1.0.9 10.1.0.65]", "[10.1.0.65]"}
	if fmt.Sprint(sp.got) != fmt.Sprint(want) {
		t.Errorf("speaker got %v, want %v", sp.got, want)
	}
	if fx.snapshots != 1 || fx.blocks != 3 {
		t.Errorf("felix got %d snapshots and %d blocks, want 1 and 3", fx.snapshots, fx.blocks)
	}
}
