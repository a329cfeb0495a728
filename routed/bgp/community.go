package bgp

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	"github.com/routed-net/routed/pkg/api"
)

// PrefixCommunities attaches BGP communities to every route this node
// originates inside CIDR (Calico's prefixAdvertisements). A value is a
// standard community "AS:value" (16-bit each) or a large one
// "AS:data1:data2" (32-bit each).
type PrefixCommunities struct {
	CIDR        netip.Prefix
	Communities []string
}

// communitiesFor lists the communities for a route to prefix, sorted and
// without duplicates.
func communitiesFor(prefix netip.Prefix, adverts []PrefixCommunities) []string {
	var out []string
	for _, a := range adverts {
		if a.CIDR.Bits() <= prefix.Bits() && a.CIDR.Contains(prefix.Addr()) {
			out = append(out, a.Communities...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// communityAttrs builds the COMMUNITIES and LARGE_COMMUNITIES attributes;
// values were checked by ParseCommunity (bad ones are skipped).
func communityAttrs(values []string) []bgp.PathAttributeInterface {
	var std []uint32
	var large []*bgp.LargeCommunity
	for _, v := range values {
		isLarge, err := api.ParseCommunity(v)
		if err != nil {
			continue
		}
		if isLarge {
			if lc, err := bgp.ParseLargeCommunity(v); err == nil {
				large = append(large, lc)
			}
			continue
		}
		as, val, _ := strings.Cut(v, ":")
		a, _ := strconv.ParseUint(as, 10, 16)
		b, _ := strconv.ParseUint(val, 10, 16)
		std = append(std, uint32(a)<<16|uint32(b))
	}
	var out []bgp.PathAttributeInterface
	if len(std) > 0 {
		out = append(out, bgp.NewPathAttributeCommunities(std))
	}
	if len(large) > 0 {
		out = append(out, bgp.NewPathAttributeLargeCommunities(large))
	}
	return out
}
