package ipam

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Verify scans every block, affinity and handle at one revision and
// returns each violated invariant, as text for a person. It is meant for
// a datastore at rest (tests, `ipam check`): a claim in progress shows up
// as a pending affinity.
//
// The invariants: each block is internally consistent (see block); each
// block has an affinity record for its node; each affinity has a block
// affine to the same node, and is confirmed; handle records say exactly
// what the blocks say each handle holds; no two blocks overlap; every
// block is inside a pool.
func (c *Client) Verify(ctx context.Context) ([]string, error) {
	s, err := c.snapshot(ctx, false)
	if err != nil {
		return nil, err
	}
	out := s.inconsistencies()
	var r Report
	s.checkPlacement(&r) // without endpoints (not read here): overlaps and pools
	for _, o := range r.Overlaps {
		out = append(out, fmt.Sprintf("blocks %s and %s overlap", o.A.CIDR, o.B.CIDR))
	}
	for _, b := range r.OutsidePools {
		out = append(out, fmt.Sprintf("block %s is outside every pool", b.CIDR))
	}
	for _, a := range s.sortedAffinities() {
		switch {
		case s.danglingAffinity(a):
			out = append(out, fmt.Sprintf("affinity %s/%s (%s) has no block affine to that node", a.node, a.cidr, a.rec.State))
		case a.rec.State != StateConfirmed:
			out = append(out, fmt.Sprintf("affinity %s/%s is %s", a.node, a.cidr, a.rec.State))
		}
	}
	for _, f := range s.handleFindings() {
		if f.want == nil {
			out = append(out, fmt.Sprintf("handle %q holds no address", f.id))
		}
	}
	return out, nil
}

// inconsistencies lists the problems that no in-progress operation can
// explain: they mean a bug, a crash in a non-atomic step, or a hand edit.
func (s *snapshot) inconsistencies() []string {
	out := slices.Clone(s.unreadable)
	keys := s.sortedBlocks()
	for _, key := range keys {
		b := s.blocks[key].b
		out = append(out, verifyBlock(b)...)
		if _, ok := s.affinityOf(b); !ok && b.owner() != "" {
			out = append(out, fmt.Sprintf("block %s is affine to %s but has no affinity record", b.CIDR, b.owner()))
		}
		if want, err := summarize(b.encode()); err == nil && !bytes.Equal(s.summaries[key], want) {
			out = append(out, fmt.Sprintf("block %s: its summary at %s is %q, want %q (what the nodes route by)", b.CIDR, summaryKeyOf(key), s.summaries[key], want))
		}
	}
	for _, key := range slices.Sorted(maps.Keys(s.summaries)) {
		if _, ok := s.blocks[key]; !ok {
			out = append(out, fmt.Sprintf("block summary %s has no block at %s", summaryKeyOf(key), key))
		}
	}
	for _, f := range s.handleFindings() {
		switch {
		case f.want == nil:
		case f.has == nil:
			out = append(out, fmt.Sprintf("handle %q holds addresses in blocks but has no handle record", f.id))
		default:
			out = append(out, fmt.Sprintf("handle %q record says %v but blocks say %v", f.id, f.has.Blocks, f.want.Blocks))
		}
	}
	return out
}

// danglingAffinity reports whether a has no block affine to its node.
func (s *snapshot) danglingAffinity(a affKV) bool {
	b, ok := s.blocks[blockKey(a.cidr)]
	return !ok || b.b.owner() != a.node
}

func (s *snapshot) sortedAffinities() []affKV {
	out := make([]affKV, 0, len(s.affs))
	for _, a := range s.affs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y affKV) int {
		if x.node != y.node {
			if x.node < y.node {
				return -1
			}
			return 1
		}
		return x.cidr.Addr().Compare(y.cidr.Addr())
	})
	return out
}

func (s *snapshot) sortedHandles() []string {
	out := make([]string, 0, len(s.handles))
	for id := range s.handles {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}
