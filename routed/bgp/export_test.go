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
	got := ownRoutesOnly(peers, 64512, []string{"10.0.2.1/32"})
	if want := []string{"10.0.1.1/32"}; !slices.Equal(got, want) {
		t.Fatalf("ownRoutesOnly = %v, want %v", got, want)
	}
	// Its keep-next-hop policy not installed, the peer that asked for
	// it stays limited.
	got = ownRoutesOnly(peers, 64512, nil)
	if want := []string{"10.0.1.1/32", "10.0.2.1/32"}; !slices.Equal(got, want) {
		t.Fatalf("ownRoutesOnly without keep-next-hop installed = %v, want %v", got, want)
	}
	if got := ownRoutesOnly(peers[2:3], 64512, nil); len(got) != 0 {
		t.Fatalf("iBGP peers must keep learned routes: %v", got)
	}
}
