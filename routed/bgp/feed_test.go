package bgp

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestBorrowedAddrs: the speaker is handed only this node's borrowed
// addresses, and only when they change.
func TestBorrowedAddrs(t *testing.T) {
	var got []string
	b := newBorrowedAddrs("me", func(a []netip.Addr) { got = append(got, fmt.Sprint(a)) })
	b1, b2 := netip.MustParsePrefix("10.1.0.0/26"), netip.MustParsePrefix("10.1.0.64/26")
	a := netip.MustParseAddr
	b.OnBorrowedSnapshot(map[netip.Prefix]map[netip.Addr]string{
		b1: {a("10.1.0.9"): "me", a("10.1.0.3"): "other"},
	})
	b.OnBorrowedBlock(b2, map[netip.Addr]string{a("10.1.0.70"): "other"}) // not ours
	b.OnBorrowedBlock(b2, map[netip.Addr]string{a("10.1.0.70"): "other", a("10.1.0.65"): "me"})
	b.OnBorrowedBlock(b1, nil)
	want := []string{"[10.1.0.9]", "[10.1.0.9 10.1.0.65]", "[10.1.0.65]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("speaker got %v, want %v", got, want)
	}
}
