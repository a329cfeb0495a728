package ipam

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/routed-net/routed/pkg/api"
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
// and endpoints whose address is not allocated to them.
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

	byIP := map[netip.Addr][]*api.WorkloadEndpoint{}
	for _, w := range s.weps {
		for _, n := range w.Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil {
				byIP[p.Addr()] = append(byIP[p.Addr()], w)
			}
		}
	}
	ips := make([]netip.Addr, 0, len(byIP))
	for ip := range byIP {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		ws := byIP[ip]
		if len(ws) > 1 {
			sa := SharedAddress{IP: ip}
			for _, w := range ws {
				sa.Endpoints = append(sa.Endpoints, w.Metadata.Name)
			}
			sort.Strings(sa.Endpoints)
			r.SharedAddresses = append(r.SharedAddresses, sa)
		}
		for _, w := range ws {
			if why := s.heldFor(ip, w); why != "" {
				r.EndpointMismatches = append(r.EndpointMismatches, EndpointMismatch{Endpoint: w.Metadata.Name, Node: w.Spec.Node, IP: ip, Reason: why})
			}
		}
	}
}

// heldFor says why ip is not allocated to endpoint w ("" when it is).
// With overlapping blocks any one holding it for w is enough.
func (s *snapshot) heldFor(ip netip.Addr, w *api.WorkloadEndpoint) string {
	var why []string
	for _, key := range s.sortedBlocks() {
		b := s.blocks[key].b
		o, ok := b.ordinal(ip)
		if !ok {
			continue
		}
		h := b.holder(o)
		switch {
		case h == nil:
			why = append(why, fmt.Sprintf("not allocated in block %s", b.prefix))
		case w.Spec.Handle != "" && h.Handle != w.Spec.Handle:
			why = append(why, fmt.Sprintf("allocated to handle %q in block %s, endpoint names %q", h.Handle, b.prefix, w.Spec.Handle))
		case h.Node != "" && h.Node != w.Spec.Node:
			why = append(why, fmt.Sprintf("allocated for node %q in block %s, endpoint is on %q", h.Node, b.prefix, w.Spec.Node))
		default:
			return ""
		}
	}
	if len(why) == 0 {
		return "no IPAM block holds this address"
	}
	return strings.Join(why, "; ")
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
