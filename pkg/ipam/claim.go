package ipam

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Internal outcomes of a claim; they never leave the package.
var (
	// errBlockTaken: the block belongs to another node (or is being
	// released); try another one.
	errBlockTaken = errors.New("ipam: block taken")
	// errNoFreeBlock: every block of the eligible pools exists.
	errNoFreeBlock = errors.New("ipam: no unclaimed block")
	// errRecount: the node's affinities changed while we counted them
	// against maxBlocksPerHost; re-read and decide again.
	errRecount = errors.New("ipam: affinities changed")
)

// claimNext claims an unclaimed block of the first pool that has one and
// returns its key. Candidates are tried from a random starting point so
// that nodes claiming at the same moment rarely pick the same block.
// maxGuard makes the claim fail with errRecount if the node's affinities
// changed since s was read, so concurrent claimers cannot together exceed
// maxBlocksPerHost. Blocks other nodes claim meanwhile count against
// tries, the caller's retry budget.
func (c *Client) claimNext(ctx context.Context, node string, pools []*poolInfo, s *nodeSnap, maxGuard bool, tries *retries) (string, error) {
	for _, p := range pools {
		bits := p.pool.Spec.BlockSize
		// An IPv6 pool may hold more blocks than an int counts; its
		// first 2^62 are plenty.
		n := 1 << min(bits-p.prefix.Bits(), 62)
		start := rand.IntN(n)
		for i := range n {
			cidr := blockAt(p.prefix, bits, (start+i)%n)
			if _, exists := s.blockRevs[blockKey(cidr)]; exists {
				continue
			}
			if s.view.reserved.covers(cidr) {
				continue // nothing in it could be handed out
			}
			err := c.claimBlock(ctx, node, cidr, s, maxGuard, tries)
			var orphan *orphanSummaryError
			if errors.As(err, &orphan) {
				// Unusable until repaired; any other block will do.
				// There may be many (a restore of the resources
				// without the IPAM data): each costs a claim's round
				// trips, so they are all found at once.
				log.WithError(err).WithField("block", cidr.String()).Warn("skipping a block whose summary is stored without it")
				if err := c.skipOrphans(ctx, s); err != nil {
					return "", err
				}
				err = errBlockTaken
			}
			if !errors.Is(err, errBlockTaken) {
				if err == nil {
					log.WithFields(map[string]any{"node": node, "block": cidr.String()}).Info("claimed block")
					return blockKey(cidr), nil
				}
				return "", err
			}
			s.blockRevs[blockKey(cidr)] = -1 // someone else's now
			// The next candidate is free as far as we know: no need to
			// wait before trying it, only to respect the budget.
			tries.n++
			if err := tries.spent(); err != nil {
				return "", err
			}
		}
	}
	return "", errNoFreeBlock
}

// skipOrphans marks, once per snapshot, every block whose summary is
// stored without it as existing in s, so that claimNext passes over
// them without trying to claim each (one keys-only read of the
// summaries, made only when such a block was met).
func (c *Client) skipOrphans(ctx context.Context, s *nodeSnap) error {
	if s.orphansRead {
		return nil
	}
	resp, err := c.get(ctx, summaryPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return err
	}
	s.orphansRead = true
	n := 0
	for _, kv := range resp.Kvs {
		bkey := blockPrefix + strings.TrimPrefix(string(kv.Key), summaryPrefix)
		if _, exists := s.blockRevs[bkey]; !exists {
			s.blockRevs[bkey] = -1
			n++
		}
	}
	if n > 0 {
		log.WithField("summaries", n).Warn("block summaries are stored without their blocks (a partial restore, or a hand edit?): claims pass over them until they are repaired (routedctl ipam check lists them)")
	}
	return nil
}

// blockAt returns block number i of size bits inside pool.
func blockAt(pool netip.Prefix, bits, i int) netip.Prefix {
	return netip.PrefixFrom(addrPlus(pool.Addr(), uint64(i), pool.Addr().BitLen()-bits), bits)
}

// claimBlock claims one block for node: pending affinity, then the block
// itself (create-if-absent), then the confirmed affinity.
func (c *Client) claimBlock(ctx context.Context, node string, cidr netip.Prefix, s *nodeSnap, maxGuard bool, tries *retries) error {
	akey := affinityKey(node, cidr)
	var extra []clientv3.Cmp
	if maxGuard {
		extra = append(extra, clientv3.Compare(clientv3.ModRevision(nodeAffinityPrefix(node)).WithPrefix(), "<", s.rev+1))
	}
	res, err := c.cas(ctx, []write{{key: akey, rev: 0, val: encodeAffinity(StatePending, c.now())}}, extra...)
	if err != nil {
		return err
	}
	arev := res.rev
	if !res.ok {
		cur := res.cur[akey]
		if cur == nil {
			return errRecount
		}
		// Another process of this node is claiming the same block: the
		// steps are idempotent, so help it finish.
		rec, err := decodeAffinity(cur.Value)
		if err != nil {
			return err
		}
		switch rec.State {
		case StateConfirmed:
			// Ours; its block may be stored whole by an older routed
			// (moveStray moves it) or, by a crash or hand edit, be
			// missing: then finishClaim creates it.
			whole, err := c.moveStray(ctx, blockKey(cidr))
			if err != nil || whole != nil {
				return err
			}
		case StatePendingDeletion:
			return errBlockTaken
		}
		arev = cur.ModRevision
	}
	return c.finishClaim(ctx, node, cidr, arev, uint64(s.rev), tries)
}

// finishClaim drives a pending affinity (at arev) to confirmed, creating
// the block if it does not exist, or withdraws it if the block belongs to
// another node. Every step is conditional, so several processes may run
// it for the same claim at once.
func (c *Client) finishClaim(ctx context.Context, node string, cidr netip.Prefix, arev int64, seqBase uint64, tries *retries) error {
	akey, bkey := affinityKey(node, cidr), blockKey(cidr)
	nb := newBlock(cidr, node, seqBase, c.now())
	res, err := c.cas(ctx, []write{{key: bkey, rev: 0, val: nb.encode()}})
	if err != nil {
		return err
	}
	cur := res.cur[bkey]
	if !res.ok && cur == nil {
		// Not the block but its summary's key stopped the write.
		if cur, err = c.moveStray(ctx, bkey); err != nil {
			var orphan *orphanSummaryError
			if errors.As(err, &orphan) {
				// No block to be had here: take the pending affinity
				// back rather than leave it for GC.
				if derr := c.deleteAt(ctx, akey, arev); derr != nil {
					log.WithError(derr).WithField("key", akey).Warn("could not withdraw pending affinity; GC will")
				}
			}
			return err
		}
	}
	if res.ok {
		c.blocks.put(bkey, nb, res.rev)
	} else if b := c.storeBlockKV(bkey, cur); b == nil || b.owner() != node {
		if err := c.deleteAt(ctx, akey, arev); err != nil {
			log.WithError(err).WithField("key", akey).Warn("could not withdraw pending affinity; GC will")
		}
		return errBlockTaken
	}
	for {
		// The block guard: if the block vanished (released by GC in the
		// meantime) confirming would leave an affinity without a block.
		res, err := c.cas(ctx, []write{{key: akey, rev: arev, val: encodeAffinity(StateConfirmed, c.now())}},
			clientv3.Compare(clientv3.Version(bkey), ">", 0))
		if err != nil {
			return err
		}
		if res.ok {
			return nil
		}
		cur := res.cur[akey]
		if cur != nil && cur.ModRevision == arev {
			// Only the block guard failed: the block is gone.
			if err := c.deleteAt(ctx, akey, arev); err != nil {
				return err
			}
			return errBlockTaken
		}
		if cur != nil {
			rec, err := decodeAffinity(cur.Value)
			if err != nil {
				return err
			}
			switch rec.State {
			case StateConfirmed:
				return nil
			case StatePendingDeletion:
				return errBlockTaken
			}
		}
		// Pending rewritten by a helper, or deleted by GC while the block
		// was being created (then it is recreated, still guarded on the
		// block): try again at the current revision.
		arev = modRev(cur)
		if _, err := tries.lost(ctx); err != nil {
			return err
		}
	}
}

// deleteAt deletes key if it is still at rev; a changed or missing key is
// left alone (someone else owns the decision now).
func (c *Client) deleteAt(ctx context.Context, key string, rev int64) error {
	_, err := c.cas(ctx, []write{{key: key, rev: rev}})
	return err
}

// finishPendingClaims completes claims this node left pending (a crashed
// or concurrent claimer), so their blocks become usable. It reports
// whether it changed anything.
func (c *Client) finishPendingClaims(ctx context.Context, node string, s *nodeSnap, pools []*poolInfo, tries *retries) (bool, error) {
	changed := false
	for key, a := range s.affs {
		if a.rec.State != StatePending {
			continue
		}
		_, exists := s.blockRevs[key]
		if !exists && poolOfBlock(pools, a.cidr) == nil {
			// A claim in a pool we may no longer use: withdraw it.
			if err := c.deleteAt(ctx, affinityKey(node, a.cidr), a.rev); err != nil {
				return changed, err
			}
			changed = true
			continue
		}
		err := c.finishClaim(ctx, node, a.cidr, a.rev, uint64(s.rev), tries)
		var orphan *orphanSummaryError
		if err != nil && !errors.Is(err, errBlockTaken) && !errors.As(err, &orphan) {
			// A block whose summary is stored alone: finishClaim took
			// the pending affinity back (another process of this node,
			// or one before a crash, left it); any other block will do.
			return changed, err
		}
		changed = true
	}
	return changed, nil
}
