package ipam

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"time"
)

// Allocation says who holds an address.
type Allocation struct {
	IP        netip.Addr
	Handle    string
	Namespace string
	Pod       string
	// Node is the node the address was allocated for.
	Node string
	Type string
	// Block is the block holding the address and BlockNode the node it is
	// affine to; they differ from Node for a borrowed address.
	Block     netip.Prefix
	BlockNode string
	// Seq identifies this allocation: pass it in Release so that the
	// release cannot free a later allocation of the same address.
	Seq         uint64
	AllocatedAt time.Time
}

// Borrowed reports whether the address came from another node's block.
func (a *Allocation) Borrowed() bool { return a.Node != a.BlockNode }

func allocationAt(b *block, o int) *Allocation {
	h := b.holder(o)
	return &Allocation{
		IP: b.addr(o), Handle: h.Handle, Namespace: h.Namespace, Pod: h.Pod, Node: h.Node, Type: h.Type,
		Block: b.prefix, BlockNode: b.owner(), Seq: b.Seq[o], AllocatedAt: time.UnixMilli(b.AllocatedAt[o]),
	}
}

// IPInfo returns who holds ip, read fresh from the datastore. A free
// address fails with ErrNotAllocated; one outside every pool and block
// with ErrNotInPool.
func (c *Client) IPInfo(ctx context.Context, ip netip.Addr) (*Allocation, error) {
	key, err := c.blockKeyFor(ctx, ip)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("%w: %s", ErrNotInPool, ip)
	}
	resp, err := c.get(ctx, key)
	if err != nil {
		return nil, err
	}
	b := c.storeBlockKV(key, firstKV(resp.Kvs))
	if b == nil {
		return nil, fmt.Errorf("%w: %s (its block is not claimed)", ErrNotAllocated, ip)
	}
	o, _ := b.ordinal(ip)
	if b.holder(o) == nil {
		return nil, fmt.Errorf("%w: %s (block %s of node %s)", ErrNotAllocated, ip, b.prefix, b.owner())
	}
	return allocationAt(b, o), nil
}

// Usage is a point-in-time account of every pool and block.
type Usage struct {
	// Revision is the datastore revision it was read at.
	Revision int64
	Pools    []PoolUsage
	// Orphaned lists blocks that lie in no current pool (the pool was
	// deleted or resized).
	Orphaned []BlockUsage
}

// PoolUsage accounts for one pool.
type PoolUsage struct {
	Name      string
	CIDR      netip.Prefix
	BlockSize int
	Disabled  bool
	// Size counts every address of the pool (at most math.MaxInt: an
	// IPv6 pool may hold more; SizeBits is exact); InUse the allocated
	// ones; Free is Size-InUse (including addresses in unclaimed blocks).
	Size, InUse, Free int
	// SizeBits is log2 of the pool's address count (the CIDR's host bits).
	SizeBits int
	// Borrowed counts allocations made for a node other than the block's.
	Borrowed int
	Blocks   []BlockUsage
}

// BlockUsage accounts for one block.
type BlockUsage struct {
	CIDR netip.Prefix
	Pool string
	// Node is the node the block is affine to, and State that affinity's
	// state ("" if the affinity record is missing).
	Node  string
	State string
	Size  int
	InUse int
	Free  int
	// Borrowed counts allocations made for other nodes.
	Borrowed   int
	EmptySince *time.Time
}

func usageOf(s *snapshot, key string) BlockUsage {
	b := s.blocks[key].b
	return accountOf(s, b, func(a int) string { return b.Attributes[a].Node })
}

// accountOf accounts for block b of s; nodeOf is the node of the
// attribute at an index (b's own attributes, or a view's).
func accountOf(s *snapshot, b *block, nodeOf func(int) string) BlockUsage {
	u := BlockUsage{CIDR: b.prefix, Node: b.owner(), Size: b.size(), InUse: b.inUse(), Free: b.free(), EmptySince: b.EmptySince}
	if a, ok := s.affinityOf(b); ok {
		u.State = a.rec.State
	}
	if p := s.poolOf(b.prefix); p != nil {
		u.Pool = p.name()
	}
	u.Borrowed = countBorrowed(b, u.Node, nodeOf)
	return u
}

// Usage reads every pool and block and accounts for them. It reads the
// blocks page by page and keeps only each one's account (no handle
// records, no allocations), so its memory grows with the blocks, not
// with the addresses they hold.
func (c *Client) Usage(ctx context.Context) (*Usage, error) {
	s, _, err := c.pagedSnapshot(ctx, false)
	if err != nil {
		return nil, err
	}
	// Each block is decoded keeping only its attributes' nodes: the
	// elected node's metrics read every block of the cluster at every
	// scrape (at 150,000 pods 100 MB allocated a scrape with the whole
	// blocks; BenchmarkDecodeBorrowed shows the difference a block).
	var blocks []BlockUsage
	err = c.pages(ctx, blockPrefix, s.rev, blockPage, func(kv *mvccpbKV) {
		if b, ok := s.blockNodes(string(kv.Key), kv); ok {
			blocks = append(blocks, accountOf(s, &b.block, func(a int) string { return b.Attributes[a].Node }))
		}
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(blocks, byCIDR)
	return s.usage(blocks), nil
}

// byCIDR orders blocks by address, as sortedBlocks orders them.
func byCIDR(a, b BlockUsage) int {
	if c := a.CIDR.Addr().Compare(b.CIDR.Addr()); c != 0 {
		return c
	}
	return a.CIDR.Bits() - b.CIDR.Bits()
}

// BlockOwners counts the blocks affine to each node ("" for none), as
// Usage's BlocksPerNode does, reading the blocks page by page at rev (0:
// now) and keeping only their owners.
func (c *Client) BlockOwners(ctx context.Context, rev int64) (map[string]int, error) {
	if rev != 0 {
		if err := c.checkPinned(ctx, rev); err != nil {
			return nil, err
		}
	}
	s := &snapshot{blocks: map[string]blockKV{}}
	out := map[string]int{}
	err := c.pages(ctx, blockPrefix, rev, blockPage, func(kv *mvccpbKV) {
		key := string(kv.Key)
		s.addIPAM(key, kv)
		if bkv, ok := s.blocks[key]; ok {
			out[bkv.b.owner()]++
			delete(s.blocks, key)
		}
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// usage accounts for blocks (in address order) by pool.
func (s *snapshot) usage(blocks []BlockUsage) *Usage {
	u := &Usage{Revision: s.rev}
	idx := map[string]int{}
	for i, p := range s.view.pools {
		u.Pools = append(u.Pools, PoolUsage{
			Name: p.name(), CIDR: p.prefix, BlockSize: p.pool.Spec.BlockSize, Disabled: p.pool.Spec.Disabled,
			Size:     poolSize(p.prefix),
			SizeBits: p.prefix.Addr().BitLen() - p.prefix.Bits(),
		})
		idx[p.name()] = i
	}
	for _, bu := range blocks {
		i, ok := idx[bu.Pool]
		if !ok {
			u.Orphaned = append(u.Orphaned, bu)
			continue
		}
		pu := &u.Pools[i]
		pu.InUse += bu.InUse
		pu.Borrowed += bu.Borrowed
		pu.Blocks = append(pu.Blocks, bu)
	}
	for i := range u.Pools {
		u.Pools[i].Free = u.Pools[i].Size - u.Pools[i].InUse
	}
	return u
}

// BlocksPerNode counts the blocks affine to each node.
func (u *Usage) BlocksPerNode() map[string]int {
	out := map[string]int{}
	for _, p := range u.Pools {
		for _, b := range p.Blocks {
			out[b.Node]++
		}
	}
	for _, b := range u.Orphaned {
		out[b.Node]++
	}
	return out
}

// poolSize is the address count of p, capped at math.MaxInt.
func poolSize(p netip.Prefix) int {
	if bits := p.Addr().BitLen() - p.Bits(); bits < 63 {
		return 1 << bits
	}
	return math.MaxInt
}

// BlocksForNode returns the blocks affine to node (by the block records,
// with their affinity state), ordered by address.
func (c *Client) BlocksForNode(ctx context.Context, node string) ([]BlockUsage, error) {
	s, err := c.snapshot(ctx, false)
	if err != nil {
		return nil, err
	}
	var out []BlockUsage
	for _, key := range s.sortedBlocks() {
		if s.blocks[key].b.owner() == node {
			out = append(out, usageOf(s, key))
		}
	}
	return out, nil
}
