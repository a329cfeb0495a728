package nftprefix

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
)

// TestRoundTrip: prefixes written as interval elements read back as the
// same prefixes, of both families, including ones that end at the
// family's last address (no end element) and single addresses.
func TestRoundTrip(t *testing.T) {
	for addrLen, in := range map[int][]string{
		4:  {"10.0.0.1/32", "10.0.0.2/32", "10.0.0.3/32", "10.1.0.0/16", "192.168.0.0/24", "255.255.255.255/32", "0.0.0.0/32"},
		16: {"fd00::1/128", "fd00::2/128", "fd00:1::/64", "ffff::/16"},
	} {
		var ps []netip.Prefix
		for _, s := range in {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		var els []nftables.SetElement
		for _, p := range ps {
			els = append(els, Elements(p)...)
		}
		got := Prefixes(els, addrLen)
		slices.SortFunc(got, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		if want := DropCovered(ps); !slices.Equal(got, want) {
			t.Errorf("%d-byte keys: read back %v, want %v", addrLen, got, want)
		}
	}
}

// TestDropCovered: the result is sorted and keeps only the widest of
// prefixes that overlap.
func TestDropCovered(t *testing.T) {
	var in []netip.Prefix
	for _, s := range []string{"10.0.0.0/24", "10.0.0.0/8", "10.1.2.3/32", "192.168.0.0/16", "172.16.0.0/12", "192.168.1.0/24"} {
		in = append(in, netip.MustParsePrefix(s))
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12"), netip.MustParsePrefix("192.168.0.0/16")}
	if got := DropCovered(in); !slices.Equal(got, want) {
		t.Errorf("DropCovered = %v, want %v", got, want)
	}
}

// TestPrefixesPassesOverOtherFamily: an element whose key is not of the
// family asked for is not read as an address of it.
func TestPrefixesPassesOverOtherFamily(t *testing.T) {
	els := append(Elements(netip.MustParsePrefix("10.0.0.0/24")), Elements(netip.MustParsePrefix("fd00::/64"))...)
	if got := Prefixes(els, 4); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}) {
		t.Errorf("Prefixes(4) = %v", got)
	}
}
