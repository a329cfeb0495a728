package ipam

import (
	"encoding/json"
	"fmt"
	"net/netip"
)

// blockSummary is what the node feed needs of a block, stored under
// summaryPrefix beside the whole block (keys.go): written in the same
// transaction as every change of the block, deleted with it. It has no
// per-address arrays, so a routed older than layout 2 refuses it as a
// corrupt block instead of taking it for an empty one.
type blockSummary struct {
	CIDR     string `json:"cidr"`
	Affinity string `json:"affinity"`
	InUse    int    `json:"inUse"`
	// Others counts the allocations whose node is not the block's
	// (BlockTally.Borrowed); Borrowed lists those that name a node.
	Others int `json:"others,omitempty"`
	// Borrowed are the addresses held by other nodes than the block's
	// own, with the node holding each.
	Borrowed map[string]string `json:"borrowed,omitempty"`
	// Layout is 2; a whole block has none.
	Layout int `json:"layout"`
}

// summaryLayout is the layout a summary says it belongs to.
const summaryLayout = 2

// summarize is the summary of the block whose stored value is val.
func summarize(val []byte) ([]byte, error) {
	b, err := decodeBlockNodes(val)
	if err != nil {
		return nil, err
	}
	owner := b.owner()
	s := blockSummary{CIDR: b.CIDR, Affinity: b.Affinity, InUse: b.inUse(), Layout: summaryLayout,
		Others: countBorrowed(&b.block, owner, func(a int) string { return b.Attributes[a].Node })}
	if br := b.borrowed(); len(br) > 0 {
		s.Borrowed = make(map[string]string, len(br))
		for a, n := range br {
			s.Borrowed[a.String()] = n
		}
	}
	return json.Marshal(s)
}

// isSummary reports whether a value stored under summaryPrefix is a
// summary (layout 2) rather than a whole block stored before it.
func isSummary(val []byte) bool {
	var probe struct {
		Layout      int             `json:"layout"`
		Allocations json.RawMessage `json:"allocations"`
	}
	return json.Unmarshal(val, &probe) == nil && probe.Layout == summaryLayout && probe.Allocations == nil
}

// decodeSummary reads a summary stored at key, checking that its cidr
// is the key's and that every borrowed address is inside it.
func decodeSummary(key string, val []byte) (netip.Prefix, BlockTally, map[netip.Addr]string, error) {
	p, err := parseBlockKey(key)
	if err != nil {
		return p, BlockTally{}, nil, err
	}
	var s blockSummary
	if err := json.Unmarshal(val, &s); err != nil {
		return p, BlockTally{}, nil, fmt.Errorf("%w: block summary: %w", ErrCorrupt, err)
	}
	sp, err := netip.ParsePrefix(s.CIDR)
	if err != nil || sp.Masked() != p || sp.Addr().Zone() != "" || sp.Addr().Is4In6() || p.Addr().BitLen()-p.Bits() > 16 {
		return p, BlockTally{}, nil, fmt.Errorf("%w: block summary at %s has cidr %q", ErrCorrupt, key, s.CIDR)
	}
	size := 1 << (p.Addr().BitLen() - p.Bits())
	if s.InUse < 0 || s.InUse > size || s.Others > s.InUse || len(s.Borrowed) > s.Others {
		return p, BlockTally{}, nil, fmt.Errorf("%w: block summary %s: %d in use, %d of other nodes, %d borrowed, of %d", ErrCorrupt, s.CIDR, s.InUse, s.Others, len(s.Borrowed), size)
	}
	owner := (&block{Affinity: s.Affinity}).owner()
	br := make(map[netip.Addr]string, len(s.Borrowed))
	for as, node := range s.Borrowed {
		a, err := netip.ParseAddr(as)
		if err != nil || a.Zone() != "" || !p.Contains(a) || node == "" || node == owner {
			return p, BlockTally{}, nil, fmt.Errorf("%w: block summary %s: borrowed address %q (node %q)", ErrCorrupt, s.CIDR, as, node)
		}
		br[a] = node
	}
	return p, BlockTally{Node: owner, InUse: int32(s.InUse), Borrowed: int32(s.Others)}, br, nil
}
