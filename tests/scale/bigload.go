package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// txnOps is how many writes one bulk transaction carries (etcd's default
// --max-txn-ops is 128).
const txnOps = 100

// loader writes the simulated cluster fast: many clients' worth of
// transactions at once against the one etcd (fsync on, as in
// production), each record encoded by routed's own code.
type loader struct {
	ds      *datastore.Client
	ic      *ipam.Client
	workers int
	seed    uint64
	txns    atomic.Int64
}

// parallel runs f(0..n-1) on ld.workers goroutines and returns the first
// error.
func (ld *loader) parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for w := 0; w < ld.workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// put writes resources in one transaction, each with datastore.Encode
// (defaults, validation, the key routed reads).
func (ld *loader) put(ctx context.Context, rs []api.Resource) error {
	for len(rs) > txnOps {
		if err := ld.put(ctx, rs[:txnOps]); err != nil {
			return err
		}
		rs = rs[txnOps:]
	}
	ops := make([]clientv3.Op, 0, len(rs))
	for _, r := range rs {
		key, val, err := datastore.Encode(r)
		if err != nil {
			return fmt.Errorf("%s %s: %w", r.GetKind(), r.Meta().Name, err)
		}
		ops = append(ops, clientv3.OpPut(key, string(val)))
	}
	return datastore.RetryUnavailable(ctx, func() error {
		ld.txns.Add(1)
		_, err := ld.ds.Etcd().Txn(ctx).Then(ops...).Commit()
		return ld.ds.Wrap(err)
	})
}

// putAll writes gen(i) for i < n in transactions of txnOps.
func (ld *loader) putAll(ctx context.Context, n int, gen func(i int) []api.Resource) error {
	batches := (n + txnOps - 1) / txnOps
	return ld.parallel(ctx, batches, func(ctx context.Context, b int) error {
		var rs []api.Resource
		for i := b * txnOps; i < min(n, (b+1)*txnOps); i++ {
			rs = append(rs, gen(i)...)
		}
		return ld.put(ctx, rs)
	})
}

// create writes each resource with datastore.Create: policies carry
// their tier's guard, which only Create and Update write.
func (ld *loader) create(ctx context.Context, rs []api.Resource) error {
	return ld.parallel(ctx, len(rs), func(ctx context.Context, i int) error {
		return datastore.RetryUnavailable(ctx, func() error {
			ld.txns.Add(1)
			_, err := ld.ds.Create(ctx, rs[i])
			return err
		})
	})
}

// simNodes writes simulated nodes: per node its Node record, its blocks
// with their confirmed affinities and one handle per pod (the IPAM
// client's import: the records a claim and the pods' assignments leave),
// and its pods' WorkloadEndpoints. pods[i] gets node i's pods.
func (ld *loader) simNodes(ctx context.Context, sh *shape, blocks []netip.Prefix, pods [][]*simPod) error {
	bsize := 1 << (32 - sh.blockBits)
	next := 0
	first := make([]int, sh.simNodes()) // first block of each node
	for i := range first {
		first[i] = next
		next += (sh.podsOn(i) + bsize - 1) / bsize
	}
	if next > len(blocks) {
		return fmt.Errorf("the pool has %d free blocks; the nodes' pods need %d", len(blocks), next)
	}
	return ld.parallel(ctx, sh.simNodes(), func(ctx context.Context, i int) error {
		name := simNodeName(i)
		if err := ld.put(ctx, []api.Resource{simNode(i, sh.simNodeAddr(i))}); err != nil {
			return err
		}
		rng := rand.New(rand.NewPCG(ld.seed, uint64(i)))
		n := sh.podsOn(i)
		mine := make([]*simPod, n)
		var ibs []ipam.ImportBlock
		for j := range mine {
			p := newPod(rng, i+j*sh.simNodes(), sh.namespaces, name, sh.track)
			b := j / bsize
			if b == len(ibs) {
				ibs = append(ibs, ipam.ImportBlock{CIDR: blocks[first[i]+b], Node: name})
			}
			ord := j % bsize
			p.addr = addrAt(blocks[first[i]+b], ord)
			ibs[b].Allocations = append(ibs[b].Allocations, ipam.ImportAllocation{Ordinal: ord, Handle: p.handle(),
				Namespace: p.namespace(), Pod: p.name, Node: name, Type: ipam.TypePod})
			mine[j] = p
		}
		err := datastore.RetryUnavailable(ctx, func() error {
			ld.txns.Add(int64(2 * len(ibs)))
			_, err := ld.ic.Import(ctx, ibs, false)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: import its blocks: %w", name, err)
		}
		for start := 0; start < n; start += txnOps {
			var rs []api.Resource
			for _, p := range mine[start:min(n, start+txnOps)] {
				rs = append(rs, p.wep())
			}
			if err := ld.put(ctx, rs); err != nil {
				return err
			}
		}
		pods[i] = mine
		return nil
	})
}

// addrAt is address number o of block b.
func addrAt(b netip.Prefix, o int) netip.Addr {
	a := b.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(o)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// freeBlocks lists the pool's blocks, in order, less those taken.
func freeBlocks(pool netip.Prefix, bits int, taken map[netip.Prefix]bool) []netip.Prefix {
	var out []netip.Prefix
	n := 1 << (bits - pool.Bits())
	for i := 0; i < n; i++ {
		b := netip.PrefixFrom(addrAt(pool, i<<(32-bits)), bits)
		if !taken[b] {
			out = append(out, b)
		}
	}
	return out
}
