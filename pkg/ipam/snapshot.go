package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// snapshot is every IPAM record, the pools and optionally the nodes and
// workload endpoints, all read at one revision so that cross-record
// checks never see a half-applied change.
type snapshot struct {
	rev     int64
	view    *clusterView
	blocks  map[string]blockKV  // by block key
	affs    map[string]affKV    // by affinity key
	handles map[string]handleKV // by handle ID
	// nodes are only read by full snapshots (and blocksAndNodes).
	nodes map[string]*api.Node
	// eps is what the endpoints say, in full snapshots (scanEndpoints).
	eps *endpointMarks
	// paged: the handle records were not kept but compared with the
	// blocks as they were read, with found the result (joinHandles).
	paged bool
	found []handleFinding
	// idx indexes the blocks, once built (index).
	idx *blockIndex
	// unreadable lists records that could not be decoded.
	unreadable []string
	// summaries are the blocks' summaries, by block key (blockPrefix);
	// legacy the keys under summaryPrefix holding a whole block (one
	// that decodes: moveLegacy moves it).
	summaries map[string][]byte
	legacy    []string
	// reclaimable is the Client's (see WithReclaimable); nil: any absent
	// node.
	reclaimable func(node string) bool
}

type blockKV struct {
	b   *block
	rev int64
}

type handleKV struct {
	h   *handleRec
	rev int64
}

// snapshot reads the IPAM state in one round trip; full adds nodes and
// what the workload endpoints say, which leak detection needs, read page
// by page (fullSnapshot).
func (c *Client) snapshot(ctx context.Context, full bool) (*snapshot, error) {
	if full {
		return c.fullSnapshot(ctx)
	}
	resp, err := c.readMany(ctx,
		clientv3.OpGet(ipamPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(datastore.KindPrefix(api.KindIPPool), clientv3.WithPrefix()),
		clientv3.OpGet(ipamConfigKey()),
		reservationsOp(),
		clientv3.OpGet(blockPrefix, clientv3.WithPrefix()))
	if err != nil {
		return nil, err
	}
	r := resp.Responses
	s := c.newSnapshot(resp.Header.Revision, r[1:4])
	s.handles = map[string]handleKV{}
	for _, kv := range r[0].GetResponseRange().Kvs {
		s.addIPAM(string(kv.Key), kv)
	}
	for _, kv := range r[4].GetResponseRange().Kvs {
		s.addIPAM(string(kv.Key), kv)
	}
	return s, nil
}

// newSnapshot starts a snapshot at rev from the responses to reading the
// pools, the IPAM configuration and the reservations (in that order),
// and makes its view of them the Client's.
func (c *Client) newSnapshot(rev int64, view []*etcdserverpb.ResponseOp) *snapshot {
	s := &snapshot{
		rev:    rev,
		view:   buildView(rev, view[0].GetResponseRange().Kvs, view[1].GetResponseRange().Kvs, view[2].GetResponseRange().Kvs),
		blocks: map[string]blockKV{},
		affs:   map[string]affKV{},
	}
	c.view.Store(s.view)
	return s
}

func (s *snapshot) addIPAM(key string, kv *mvccpbKV) {
	bad := func(err error) { s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", key, err)) }
	switch {
	case strings.HasPrefix(key, blockPrefix):
		b, err := decodeBlock(kv.Value)
		if err == nil {
			err = keyMatches(key, b)
		}
		if err != nil {
			bad(err)
			return
		}
		s.blocks[key] = blockKV{b: b, rev: kv.ModRevision}
	case strings.HasPrefix(key, summaryPrefix):
		// The block's summary (the block is read from blockPrefix), or
		// a block a routed older than layout 2 stored whole there
		// after ensureLayout moved the others (moved at the next
		// Client's start, or by GC: moveLegacy).
		if !isSummary(kv.Value) {
			bad(fmt.Errorf("%w: stored whole in the layout before 2 (by an older routed?): it is moved at the next IPAM garbage collection", ErrCorrupt))
			if b, err := decodeBlock(kv.Value); err == nil && keyMatches(key, b) == nil {
				s.legacy = append(s.legacy, key) // a block moveLegacy can move
			}
			return
		}
		if s.summaries == nil {
			s.summaries = map[string][]byte{}
		}
		s.summaries[blockPrefix+strings.TrimPrefix(key, summaryPrefix)] = kv.Value
	case strings.HasPrefix(key, affinityPrefix):
		a, err := parseAffinityKV(key, kv.Value, kv.ModRevision)
		if err != nil {
			bad(err)
			return
		}
		s.affs[key] = a
	case strings.HasPrefix(key, handlePrefix):
		h, err := decodeHandle(kv.Value)
		if err != nil {
			bad(err)
			return
		}
		s.handles[strings.TrimPrefix(key, handlePrefix)] = handleKV{h: h, rev: kv.ModRevision}
	}
}

// blockNodes decodes the block at key keeping only its attributes'
// nodes (what Usage needs), or notes it unreadable as addIPAM does.
func (s *snapshot) blockNodes(key string, kv *mvccpbKV) (*blockNodes, bool) {
	b, err := decodeBlockNodes(kv.Value)
	if err == nil {
		err = keyMatches(key, &b.block)
	}
	if err != nil {
		s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", key, err))
		return nil, false
	}
	return b, true
}

// keyMatches checks that a block is stored under its own key.
func keyMatches(key string, b *block) error {
	if p, err := parseBlockKey(key); err != nil || p != b.prefix {
		return fmt.Errorf("%w: key does not match cidr %s", ErrCorrupt, b.CIDR)
	}
	return nil
}

// sortedBlocks returns the block keys ordered by address.
func (s *snapshot) sortedBlocks() []string {
	keys := make([]string, 0, len(s.blocks))
	for k := range s.blocks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		pa, pb := s.blocks[a].b.prefix, s.blocks[b].b.prefix
		if c := pa.Addr().Compare(pb.Addr()); c != 0 {
			return c
		}
		return pa.Bits() - pb.Bits()
	})
	return keys
}

// derivedHandles computes, from the blocks alone, which ordinals every
// handle holds: what the handle records must say.
func (s *snapshot) derivedHandles() map[string]*handleRec {
	x := s.index()
	out := map[string]*handleRec{}
	for lo := 0; lo < len(x.refs); {
		_, hi := x.group(x.refs[lo].handle)
		out[x.refs[lo].handle] = x.record(s, lo, hi)
		lo = hi
	}
	return out
}

// affinityOf returns the affinity record of a block's owner, if any.
func (s *snapshot) affinityOf(b *block) (affKV, bool) {
	a, ok := s.affs[affinityKey(b.owner(), b.prefix)]
	return a, ok
}

func (s *snapshot) poolOf(p netip.Prefix) *poolInfo { return poolOfBlock(s.view.pools, p) }

// gone reports whether node is absent from the datastore and may be
// treated as gone for good (see WithReclaimable).
func (s *snapshot) gone(node string) bool {
	return s.nodes[node] == nil && (s.reclaimable == nil || s.reclaimable(node))
}
