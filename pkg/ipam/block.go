package ipam

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"net/netip"
	"slices"
	"time"
)

// Allocation types recorded in a block's attributes.
const (
	TypePod    = "pod"
	TypeTunnel = "tunnel"
)

// block is one IPAM block as stored in etcd. Ordinals are offsets from the
// block's first address. Invariants (verifyBlock checks them):
//   - every ordinal is either allocated (Allocations[o] != nil) or listed
//     exactly once in Unallocated;
//   - Seq[o] and AllocatedAt[o] are non-zero exactly when o is allocated,
//     and Seq[o] <= SequenceNumber;
//   - every attribute is referenced by at least one allocation;
//   - EmptySince is set exactly when nothing is allocated.
//
// Records are shared through the cache: never modify one in place, modify
// a clone.
type block struct {
	CIDR string `json:"cidr"`
	// Affinity is "host:<node>"; it is set when the block is claimed and
	// never changes while the block exists.
	Affinity    string `json:"affinity"`
	Allocations []*int `json:"allocations"`
	// Unallocated is a FIFO: allocation takes the head, release appends,
	// so a freed address is reused as late as possible.
	Unallocated []int       `json:"unallocated"`
	Attributes  []attribute `json:"attributes"`
	// SequenceNumber is bumped on every change. A new block starts at the
	// etcd revision its claimer read, so numbers never repeat across a
	// block's deletion and re-creation.
	SequenceNumber uint64 `json:"sequenceNumber"`
	// Seq is the SequenceNumber at which each ordinal was allocated; a
	// release naming another number is stale and refused.
	Seq []uint64 `json:"allocationSequence"`
	// AllocatedAt is when each ordinal was allocated (Unix ms); GC leaves
	// allocations younger than its grace period alone.
	AllocatedAt []int64 `json:"allocatedAt"`
	// EmptySince is when the block last became empty.
	EmptySince *time.Time `json:"emptySince,omitempty"`

	prefix netip.Prefix
}

// attribute says who holds an allocation. Allocations with identical
// attributes (one handle's addresses) share one entry.
type attribute struct {
	Handle    string `json:"handle"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Node      string `json:"node"`
	Type      string `json:"type"`
}

// newBlock returns an empty block claimed by node.
func newBlock(p netip.Prefix, node string, seqBase uint64, now time.Time) *block {
	n := 1 << (p.Addr().BitLen() - p.Bits())
	b := &block{
		CIDR:           p.String(),
		Affinity:       hostAffinity(node),
		Allocations:    make([]*int, n),
		Unallocated:    make([]int, n),
		Attributes:     []attribute{},
		SequenceNumber: seqBase,
		Seq:            make([]uint64, n),
		AllocatedAt:    make([]int64, n),
		prefix:         p,
	}
	for i := range b.Unallocated {
		b.Unallocated[i] = i
	}
	t := now.UTC()
	b.EmptySince = &t
	return b
}

func decodeBlock(data []byte) (*block, error) {
	var b block
	if err := decodeChecked(data, &b, &b, func() int { return len(b.Attributes) }); err != nil {
		return nil, err
	}
	return &b, nil
}

// decodeChecked decodes data into v, which holds the block b (v is b,
// or a view of it with its own attributes: attrs counts those), then
// checks b's cidr and arrays and sets its prefix.
func decodeChecked(data []byte, v any, b *block, attrs func() int) error {
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: block: %w", ErrCorrupt, err)
	}
	p, err := netip.ParsePrefix(b.CIDR)
	if err != nil || p.Addr().Is4In6() || p.Addr().Zone() != "" || p.Addr().BitLen()-p.Bits() > 16 {
		return fmt.Errorf("%w: block has bad cidr %q", ErrCorrupt, b.CIDR)
	}
	b.prefix = p.Masked()
	n := b.size()
	if len(b.Allocations) != n || len(b.Seq) != n || len(b.AllocatedAt) != n {
		return fmt.Errorf("%w: block %s: per-address arrays do not have %d entries", ErrCorrupt, b.CIDR, n)
	}
	for o, a := range b.Allocations {
		if a != nil && (*a < 0 || *a >= attrs()) {
			return fmt.Errorf("%w: block %s: ordinal %d refers to missing attribute %d", ErrCorrupt, b.CIDR, o, *a)
		}
	}
	for _, o := range b.Unallocated {
		if o < 0 || o >= n {
			return fmt.Errorf("%w: block %s: unallocated ordinal %d out of range", ErrCorrupt, b.CIDR, o)
		}
	}
	return nil
}

func (b *block) encode() []byte {
	data, err := json.Marshal(b)
	if err != nil {
		panic(fmt.Sprintf("ipam: marshal block: %v", err)) // plain data: cannot fail
	}
	return data
}

func (b *block) size() int { return 1 << (b.prefix.Addr().BitLen() - b.prefix.Bits()) }

func (b *block) free() int { return len(b.Unallocated) }

func (b *block) inUse() int { return b.size() - len(b.Unallocated) }

// owner returns the node the block is affine to ("" if none).
func (b *block) owner() string {
	if len(b.Affinity) > 5 && b.Affinity[:5] == "host:" {
		return b.Affinity[5:]
	}
	return ""
}

func (b *block) addr(o int) netip.Addr { return addrAt(b.prefix, o) }

// familyOf returns 4 or 6.
func familyOf(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 4
	}
	return 6
}

// addrAt returns the address at offset o from the start of p (IPv4 or
// IPv6; o must fit in the prefix).
func addrAt(p netip.Prefix, o int) netip.Addr { return addrPlus(p.Addr(), uint64(o), 0) }

// addrPlus returns a + (off << shift), in a's family (wrapping within
// it). shift lets a block index address pools wider than 64 bits of
// blocks' worth.
func addrPlus(a netip.Addr, off uint64, shift int) netip.Addr {
	if a.Is4() {
		b := a.As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		v += uint32(off << shift)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	var addHi, addLo uint64
	switch {
	case shift == 0:
		addLo = off
	case shift < 64:
		addHi, addLo = off>>(64-shift), off<<shift
	default:
		addHi = off << (shift - 64)
	}
	lo2, carry := bits.Add64(lo, addLo, 0)
	hi2, _ := bits.Add64(hi, addHi, carry)
	binary.BigEndian.PutUint64(b[:8], hi2)
	binary.BigEndian.PutUint64(b[8:], lo2)
	return netip.AddrFrom16(b)
}

func (b *block) ordinal(ip netip.Addr) (int, bool) {
	if !b.prefix.Contains(ip) {
		return 0, false
	}
	return addrOffset(b.prefix.Addr(), ip), true
}

// addrOffset returns ip - base for an ip a block (at most 2^16 addresses)
// past base, in either family.
func addrOffset(base, ip netip.Addr) int {
	if base.Is4() {
		x, y := ip.As4(), base.As4()
		return int(binary.BigEndian.Uint32(x[:]) - binary.BigEndian.Uint32(y[:]))
	}
	x, y := ip.As16(), base.As16()
	return int(binary.BigEndian.Uint64(x[8:]) - binary.BigEndian.Uint64(y[8:]))
}

// holder returns the attribute of an allocated ordinal, or nil.
func (b *block) holder(o int) *attribute {
	if o < 0 || o >= len(b.Allocations) || b.Allocations[o] == nil {
		return nil
	}
	return &b.Attributes[*b.Allocations[o]]
}

func (b *block) clone() *block {
	c := *b
	c.Allocations = make([]*int, len(b.Allocations))
	for i, a := range b.Allocations {
		if a != nil {
			v := *a
			c.Allocations[i] = &v
		}
	}
	c.Unallocated = slices.Clone(b.Unallocated)
	c.Attributes = slices.Clone(b.Attributes)
	c.Seq = slices.Clone(b.Seq)
	c.AllocatedAt = slices.Clone(b.AllocatedAt)
	if b.EmptySince != nil {
		t := *b.EmptySince
		c.EmptySince = &t
	}
	return &c
}

// allocate takes the ordinal at the head of the free list, or ordinal
// want when want >= 0, and records attr for it. It reports false when no
// such ordinal is free.
func (b *block) allocate(want int, attr attribute, now time.Time) (int, bool) {
	i := 0
	if want >= 0 {
		i = slices.Index(b.Unallocated, want)
	}
	if i < 0 || len(b.Unallocated) == 0 {
		return 0, false
	}
	o := b.Unallocated[i]
	b.Unallocated = slices.Delete(b.Unallocated, i, i+1)
	idx := slices.Index(b.Attributes, attr)
	if idx < 0 {
		b.Attributes = append(b.Attributes, attr)
		idx = len(b.Attributes) - 1
	}
	b.Allocations[o] = &idx
	b.SequenceNumber++
	b.Seq[o] = b.SequenceNumber
	b.AllocatedAt[o] = max(now.UnixMilli(), 1)
	b.EmptySince = nil
	return o, true
}

// release frees ordinal o (which must be allocated) to the tail of the
// free list and drops its attribute if nothing else uses it.
func (b *block) release(o int, now time.Time) {
	idx := *b.Allocations[o]
	b.Allocations[o] = nil
	b.Unallocated = append(b.Unallocated, o)
	b.Seq[o] = 0
	b.AllocatedAt[o] = 0
	b.SequenceNumber++
	b.dropAttribute(idx)
	if b.inUse() == 0 {
		t := now.UTC()
		b.EmptySince = &t
	}
}

// dropAttribute removes attribute idx if no allocation refers to it,
// renumbering the allocations that refer to later attributes.
func (b *block) dropAttribute(idx int) {
	for _, a := range b.Allocations {
		if a != nil && *a == idx {
			return
		}
	}
	b.Attributes = slices.Delete(b.Attributes, idx, idx+1)
	for _, a := range b.Allocations {
		if a != nil && *a > idx {
			*a--
		}
	}
}

// verifyBlock returns every violated invariant of b, for the consistency
// checker.
func verifyBlock(b *block) []string {
	var out []string
	bad := func(format string, args ...any) {
		out = append(out, fmt.Sprintf("block %s: ", b.CIDR)+fmt.Sprintf(format, args...))
	}
	seen := make([]int, b.size())
	for _, o := range b.Unallocated {
		seen[o]++
	}
	used := make([]bool, len(b.Attributes))
	inUse := 0
	for o, a := range b.Allocations {
		switch {
		case a != nil:
			inUse++
			used[*a] = true
			if seen[o] != 0 {
				bad("ordinal %d is both allocated and on the free list", o)
			}
			if b.Seq[o] == 0 || b.Seq[o] > b.SequenceNumber {
				bad("ordinal %d has sequence %d (block at %d)", o, b.Seq[o], b.SequenceNumber)
			}
			if b.AllocatedAt[o] == 0 {
				bad("ordinal %d has no allocation time", o)
			}
		case seen[o] != 1:
			bad("free ordinal %d is on the free list %d times", o, seen[o])
		case b.Seq[o] != 0 || b.AllocatedAt[o] != 0:
			bad("free ordinal %d keeps a sequence number or time", o)
		}
	}
	for i, u := range used {
		if !u {
			bad("attribute %d (%s) is not referenced", i, b.Attributes[i].Handle)
		}
	}
	if (inUse == 0) != (b.EmptySince != nil) {
		bad("emptySince=%v with %d addresses in use", b.EmptySince, inUse)
	}
	if b.owner() == "" {
		bad("affinity %q is not host:<node>", b.Affinity)
	}
	return out
}
