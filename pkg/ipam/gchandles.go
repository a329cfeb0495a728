package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// blockIndex orders a snapshot's blocks, finds them by address and lists
// every allocation by handle: what the blocks say each handle holds,
// without a record per handle. It refers to the blocks' own strings, so
// it costs a few words per allocation.
type blockIndex struct {
	keys []string               // block keys, as sortedBlocks orders them
	at   map[netip.Prefix]int32 // a block's prefix -> its place in keys
	bits [2][]int               // the blocks' prefix lengths, IPv4 and IPv6
	refs []allocRef             // every allocation, by handle, block, ordinal
}

// allocRef is one allocated ordinal of keys[blk].
type allocRef struct {
	handle   string
	blk, ord int32
}

// index builds (once) the snapshot's blockIndex. The snapshot's blocks
// must not change afterwards.
func (s *snapshot) index() *blockIndex {
	if s.idx != nil {
		return s.idx
	}
	x := &blockIndex{keys: s.sortedBlocks(), at: make(map[netip.Prefix]int32, len(s.blocks))}
	for i, key := range x.keys {
		b := s.blocks[key].b
		x.at[b.prefix] = int32(i)
		fam := familyOf(b.prefix) / 6 // 0 for IPv4, 1 for IPv6
		if !slices.Contains(x.bits[fam], b.prefix.Bits()) {
			x.bits[fam] = append(x.bits[fam], b.prefix.Bits())
		}
		for o := range b.Allocations {
			if h := b.holder(o); h != nil {
				x.refs = append(x.refs, allocRef{handle: h.Handle, blk: int32(i), ord: int32(o)})
			}
		}
	}
	// Built in block then ordinal order: a stable sort by handle keeps it.
	slices.SortStableFunc(x.refs, func(a, b allocRef) int { return strings.Compare(a.handle, b.handle) })
	s.idx = x
	return x
}

// group returns where handle's allocations are in refs (lo == hi: none).
func (x *blockIndex) group(handle string) (lo, hi int) {
	lo, _ = slices.BinarySearchFunc(x.refs, handle, func(r allocRef, h string) int { return strings.Compare(r.handle, h) })
	hi = lo
	for hi < len(x.refs) && x.refs[hi].handle == handle {
		hi++
	}
	return lo, hi
}

// record is the handle record the blocks call for, from refs[lo:hi]
// (one handle's allocations).
func (x *blockIndex) record(s *snapshot, lo, hi int) *handleRec {
	h := &handleRec{ID: x.refs[lo].handle, Blocks: map[string][]int{}}
	for _, r := range x.refs[lo:hi] {
		cidr := s.blocks[x.keys[r.blk]].b.CIDR
		h.Blocks[cidr] = append(h.Blocks[cidr], int(r.ord))
	}
	return h
}

// containing returns the places in keys of the blocks holding ip, in
// keys' order (more than one only where blocks overlap).
func (x *blockIndex) containing(ip netip.Addr) []int32 {
	var out []int32
	fam := 0
	if ip.Is6() {
		fam = 1
	}
	for _, bits := range x.bits[fam] {
		if i, ok := x.at[netip.PrefixFrom(ip, bits).Masked()]; ok {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// handleFinding is a handle whose record does not say what the blocks
// say: no record (rev 0), a record for a handle that holds nothing
// (want nil), or a record that differs.
type handleFinding struct {
	id   string
	rev  int64      // the record's ModRevision; 0: no record
	has  *handleRec // the record; nil: none
	want *handleRec // what the blocks say; nil: nothing
}

// handleJoin merges the handle records, given in ID order, with what the
// blocks say, and keeps every disagreement, in ID order.
type handleJoin struct {
	s   *snapshot
	x   *blockIndex
	i   int // the next allocation in x.refs not yet matched
	out []handleFinding
}

func (s *snapshot) newHandleJoin() *handleJoin { return &handleJoin{s: s, x: s.index()} }

// holdersBefore reports the handles that hold addresses but have no
// record: those sorting before id, or all that are left when last.
func (j *handleJoin) holdersBefore(id string, last bool) {
	for j.i < len(j.x.refs) && (last || j.x.refs[j.i].handle < id) {
		lo, hi := j.x.group(j.x.refs[j.i].handle)
		j.out = append(j.out, handleFinding{id: j.x.refs[lo].handle, want: j.x.record(j.s, lo, hi)})
		j.i = hi
	}
}

// record takes the next record (IDs ascending).
func (j *handleJoin) record(id string, rec handleKV) {
	j.holdersBefore(id, false)
	if j.i < len(j.x.refs) && j.x.refs[j.i].handle == id {
		lo, hi := j.x.group(id)
		j.i = hi
		if want := j.x.record(j.s, lo, hi); !rec.h.equal(want) {
			j.out = append(j.out, handleFinding{id: id, rev: rec.rev, has: rec.h, want: want})
		}
		return
	}
	j.out = append(j.out, handleFinding{id: id, rev: rec.rev, has: rec.h})
}

// done returns the findings, once every record was given.
func (j *handleJoin) done() []handleFinding {
	j.holdersBefore("", true)
	return j.out
}

// handleFindings compares the handle records with the blocks. A paged
// snapshot compared them while it read them (joinHandles); one that
// holds them compares them now.
func (s *snapshot) handleFindings() []handleFinding {
	if s.paged {
		return s.found
	}
	j := s.newHandleJoin()
	for _, id := range s.sortedHandles() {
		j.record(id, s.handles[id])
	}
	return j.done()
}

// joinHandles reads the handle records page by page, at s's revision and
// in ID order (etcd's key order), and keeps only those that disagree with
// the blocks (s.found). Unreadable records count as absent, as they do
// when every record is read at once.
func (c *Client) joinHandles(ctx context.Context, s *snapshot) error {
	j := s.newHandleJoin()
	err := c.pages(ctx, handlePrefix, s.rev, recordPage, func(kv *mvccpbKV) {
		h, err := decodeHandle(kv.Value)
		if err != nil {
			s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", kv.Key, err))
			return
		}
		j.record(strings.TrimPrefix(string(kv.Key), handlePrefix), handleKV{h: h, rev: kv.ModRevision})
	})
	if err != nil {
		return err
	}
	s.paged, s.found = true, j.done()
	return nil
}
