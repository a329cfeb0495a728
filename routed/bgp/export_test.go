package bgp

import (
	"net/netip"
	"slices"
	"testing"
)

func TestOwnRoutesOnly(t *testing.T) {
	peers := []Peer{
		{Address: netip.MustParseAddr("10.0.1.1"), ASN: 65000},                            // ToR, eBGP
		{Address: netip.MustParseAddr("10.0.2.1"), ASN: 65000, KeepOriginalNextHop: true}, // asked for re-advertising
		{Address: netip.MustParseAddr("10.0.1.11"), ASN: 64512},                           // cluster peer, iBGP
		{ASN: 65000}, // no address yet
	}
	got := ownRoutesOnly(peers, 64512)
	if want := []string{"10.0.1.1/32"}; !slices.Equal(got, want) {
		t.Fatalf("ownRoutesOnly = %v, want %v", got, want)
	}
	if got := ownRoutesOnly(peers[2:3], 64512); len(got) != 0 {
		t.Fatalf("iBGP peers must keep learned routes: %v", got)
	}
}
