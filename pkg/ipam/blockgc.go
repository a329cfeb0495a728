package ipam

import (
	"context"
	"errors"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReleaseEmptyBlocks gives up the affinity of node's blocks (every node's
// when node is "") that have stayed empty for the Client's empty-block
// grace period, so their addresses flow back to the pool, and finishes
// releases a crashed releaser left in pendingDeletion. It returns the
// blocks it removed. The node agent runs it periodically; GC runs it too.
func (c *Client) ReleaseEmptyBlocks(ctx context.Context, node string) ([]netip.Prefix, error) {
	var s *snapshot
	var err error
	if node == "" {
		s, err = c.snapshot(ctx, false)
	} else {
		s, err = c.nodeBlocks(ctx, node) // every node runs this: keep it small
	}
	if err != nil {
		return nil, err
	}
	return c.releaseEmpty(ctx, s, node, false)
}

// nodeBlocks reads node's affinities and their blocks (not at one
// revision: every write made from it is conditional anyway).
func (c *Client) nodeBlocks(ctx context.Context, node string) (*snapshot, error) {
	resp, err := c.get(ctx, nodeAffinityPrefix(node), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	s := &snapshot{rev: resp.Header.Revision, blocks: map[string]blockKV{}, affs: map[string]affKV{}}
	var keys []string
	for _, kv := range resp.Kvs {
		s.addIPAM(string(kv.Key), kv)
	}
	for _, a := range s.affs {
		keys = append(keys, blockKey(a.cidr))
	}
	for len(keys) > 0 {
		n := min(len(keys), 100) // etcd allows 128 operations per txn
		ops := make([]clientv3.Op, n)
		for i, k := range keys[:n] {
			ops[i] = clientv3.OpGet(k)
		}
		r, err := c.readMany(ctx, ops...)
		if err != nil {
			return nil, err
		}
		for i, k := range keys[:n] {
			if kv := firstKV(r.Responses[i].GetResponseRange().Kvs); kv != nil {
				s.addIPAM(k, kv)
			}
		}
		keys = keys[n:]
	}
	return s, nil
}

// releaseEmpty releases, among the blocks in s (of node, or all when ""),
// those empty for longer than the grace period, and with deadNodes also
// every empty block whose node no longer exists (s must then be full).
func (c *Client) releaseEmpty(ctx context.Context, s *snapshot, node string, deadNodes bool) ([]netip.Prefix, error) {
	now := c.now()
	var out []netip.Prefix
	var errs []error
	for _, a := range s.sortedAffinities() {
		if node != "" && a.node != node {
			continue
		}
		bkv, ok := s.blocks[blockKey(a.cidr)]
		if !ok || bkv.b.owner() != a.node {
			continue // dangling: GC's business
		}
		b := bkv.b
		dead := deadNodes && s.gone(a.node)
		switch {
		case a.rec.State == StatePendingDeletion:
		case a.rec.State != StateConfirmed || b.inUse() > 0:
			continue
		case !dead && (b.EmptySince == nil || now.Sub(*b.EmptySince) < c.emptyGrace):
			continue
		}
		done, err := c.releaseBlock(ctx, a, bkv)
		if err != nil {
			errs = append(errs, err)
		}
		if done {
			out = append(out, a.cidr)
		}
	}
	return out, errors.Join(errs...)
}

// blockReleaseTries bounds the attempts to remove one empty block: a
// block that keeps changing is in use, and the next pass decides again.
const blockReleaseTries = 10

// releaseBlock removes an empty block and its affinity: mark the affinity
// pendingDeletion (watchers stop routing the block), delete block and
// affinity together only if the block is still empty at the revision
// read, else hand the affinity back as confirmed. A pendingDeletion
// affinity left by a crash is finished the same way.
func (c *Client) releaseBlock(ctx context.Context, a affKV, bkv blockKV) (bool, error) {
	akey, bkey := affinityKey(a.node, a.cidr), blockKey(a.cidr)
	arev, brev := a.rev, bkv.rev
	if a.rec.State != StatePendingDeletion {
		res, err := c.cas(ctx, []write{
			{key: akey, rev: arev, val: encodeAffinity(StatePendingDeletion, c.now())},
			{key: bkey, rev: brev, guard: true},
		})
		if err != nil || !res.ok {
			return false, err // changed since read: next pass decides again
		}
		arev = res.rev
	}
	b := bkv.b
	for attempt := 1; attempt <= blockReleaseTries; attempt++ {
		if b == nil {
			return false, c.deleteAt(ctx, akey, arev)
		}
		if b.inUse() > 0 || b.owner() != a.node {
			// An allocation won the race (or a crashed releaser marked a
			// block in use): keep the block.
			_, err := c.cas(ctx, []write{{key: akey, rev: arev, val: encodeAffinity(StateConfirmed, c.now())}})
			return false, err
		}
		res, err := c.cas(ctx, []write{{key: bkey, rev: brev}, {key: akey, rev: arev}})
		if err != nil {
			return false, err
		}
		if res.ok {
			c.blocks.drop(bkey)
			log.WithField("node", a.node).WithField("block", a.cidr.String()).Info("released empty block")
			return true, nil
		}
		if modRev(res.cur[akey]) != arev {
			return false, nil // another releaser (or GC) took over
		}
		b, brev = c.storeBlockKV(bkey, res.cur[bkey]), modRev(res.cur[bkey])
	}
	return false, nil
}
