// Package nftprefix writes address prefixes as the elements of an
// nftables interval set and reads them back, for felix's two table
// owners (natout and the policy dataplane, felix/policy/nftdp), so both
// lay out and read intervals the same way.
//
// An interval set holds a prefix as two elements: its first address, and
// the address after its last flagged as the interval's end. The end is
// left out when the prefix runs to the family's last address. The
// kernel refuses overlapping intervals: DropCovered first.
package nftprefix

import (
	"net/netip"
	"slices"

	"github.com/google/nftables"
)

// Elements is p as interval elements: its first address and, unless p
// runs to the family's last address, the address after its last flagged
// as the interval's end. p must be masked.
func Elements(p netip.Prefix) []nftables.SetElement {
	out := []nftables.SetElement{{Key: p.Addr().AsSlice()}}
	if end := Last(p).Next(); end.IsValid() {
		out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
	}
	return out
}

// Last is the highest address of p.
func Last(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// DropCovered sorts ps (by address, then wider first) in place and
// removes every prefix another one covers; it returns the kept prefix of
// ps's backing array.
func DropCovered(ps []netip.Prefix) []netip.Prefix {
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	kept := ps[:0]
	for _, p := range ps {
		if len(kept) > 0 && kept[len(kept)-1].Overlaps(p) {
			continue // sorted: the earlier one is the same or wider
		}
		kept = append(kept, p)
	}
	return kept
}

// Prefixes reads interval elements of addrLen-byte keys (4 or 16) back
// as prefixes, in the order of their start elements: each start with the
// smallest end above it (none: to the last address), as the longest
// prefix from the start that reaches that end. Elements of another key
// length are passed over. Only what Elements wrote reads back exactly;
// anything else reads back as something different from any set of
// prefixes DropCovered keeps, which is all a resync needs.
func Prefixes(els []nftables.SetElement, addrLen int) []netip.Prefix {
	var starts, ends []netip.Addr
	for _, e := range els {
		a, ok := netip.AddrFromSlice(e.Key)
		if !ok || len(e.Key) != addrLen {
			continue
		}
		if e.IntervalEnd {
			ends = append(ends, a)
		} else {
			starts = append(starts, a)
		}
	}
	slices.SortFunc(ends, netip.Addr.Compare)
	out := make([]netip.Prefix, 0, len(starts))
	for _, s := range starts {
		i, found := slices.BinarySearchFunc(ends, s, netip.Addr.Compare)
		if found {
			i++
		}
		var end netip.Addr
		if i < len(ends) {
			end = ends[i]
		}
		bits := s.BitLen()
		for ; bits > 0; bits-- {
			next := Last(netip.PrefixFrom(s, bits-1)).Next()
			if netip.PrefixFrom(s, bits-1).Masked().Addr() != s || !next.IsValid() && end.IsValid() || end.IsValid() && next.Compare(end) > 0 {
				break
			}
		}
		out = append(out, netip.PrefixFrom(s, bits))
	}
	return out
}
