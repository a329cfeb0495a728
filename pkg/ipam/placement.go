package ipam

import (
	"net/netip"
)

// BlockOverlap is two blocks claiming some of the same addresses: two
// nodes may hand the same address to two pods.
type BlockOverlap struct {
	A, B BlockUsage
	// Shared lists addresses allocated in both blocks.
	Shared []netip.Addr
}

// SharedAddress is one address named by more than one endpoint.
type SharedAddress struct {
	IP        netip.Addr
	Endpoints []string
}

// EndpointMismatch is an endpoint whose address IPAM does not hold for it.
type EndpointMismatch struct {
	Endpoint string
	Node     string
	IP       netip.Addr
	// Reason says what IPAM holds instead.
	Reason string
}

// checkPlacement finds addresses that can reach two pods: overlapping
// blocks, blocks outside every pool, addresses named by two endpoints,
// and endpoints whose address is not allocated to them (the last two
// found as the endpoints were read: scanEndpoints).
func (s *snapshot) checkPlacement(r *Report) {
	keys := s.sortedBlocks()
	// Sorted by start address, a block overlaps a later one exactly when
	// the later one starts inside it; compare with every block still
	// open, not only the previous one (a /26 can hold several /28s).
	var open []*block
	for _, key := range keys {
		b := s.blocks[key].b
		if s.poolOf(b.prefix) == nil {
			r.OutsidePools = append(r.OutsidePools, usageOf(s, key))
		}
		kept := open[:0]
		for _, o := range open {
			if o.prefix.Contains(b.prefix.Addr()) {
				kept = append(kept, o)
				r.Overlaps = append(r.Overlaps, BlockOverlap{
					A: usageOf(s, blockKey(o.prefix)), B: usageOf(s, key), Shared: sharedAllocations(o, b)})
			}
		}
		open = append(kept, b)
	}

	if s.eps != nil { // endpoints were read (Check and GC)
		r.SharedAddresses, r.EndpointMismatches = s.eps.shared, s.eps.mismatches
	}
}

// sharedAllocations lists addresses allocated in both a and b.
func sharedAllocations(a, b *block) []netip.Addr {
	var out []netip.Addr
	for o := range b.Allocations {
		ip := b.addr(o)
		if ao, ok := a.ordinal(ip); ok && b.holder(o) != nil && a.holder(ao) != nil {
			out = append(out, ip)
		}
	}
	return out
}
