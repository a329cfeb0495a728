package ipam

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

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
	// nodes and weps are only read by full snapshots.
	nodes map[string]*api.Node
	weps  []*api.WorkloadEndpoint
	// unreadable lists records that could not be decoded.
	unreadable []string
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
// workload endpoints, which leak detection needs.
func (c *Client) snapshot(ctx context.Context, full bool) (*snapshot, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(ipamPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(datastore.KindPrefix(api.KindIPPool), clientv3.WithPrefix()),
		clientv3.OpGet(ipamConfigKey()),
		reservationsOp(),
	}
	if full {
		ops = append(ops,
			clientv3.OpGet(datastore.KindPrefix(api.KindNode), clientv3.WithPrefix()),
			clientv3.OpGet(datastore.KindPrefix(api.KindWorkloadEndpoint), clientv3.WithPrefix()))
	}
	resp, err := c.readMany(ctx, ops...)
	if err != nil {
		return nil, err
	}
	r := resp.Responses
	s := &snapshot{
		rev:     resp.Header.Revision,
		view:    buildView(resp.Header.Revision, r[1].GetResponseRange().Kvs, r[2].GetResponseRange().Kvs, r[3].GetResponseRange().Kvs),
		blocks:  map[string]blockKV{},
		affs:    map[string]affKV{},
		handles: map[string]handleKV{},
	}
	c.view.Store(s.view)
	for _, kv := range r[0].GetResponseRange().Kvs {
		s.addIPAM(string(kv.Key), kv)
	}
	if !full {
		return s, nil
	}
	s.nodes = map[string]*api.Node{}
	for _, kv := range r[4].GetResponseRange().Kvs {
		n, err := decodeNode(kv.Value)
		if err != nil {
			s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", kv.Key, err))
			continue
		}
		s.nodes[n.Metadata.Name] = n
	}
	for _, kv := range r[5].GetResponseRange().Kvs {
		var w api.WorkloadEndpoint
		if err := json.Unmarshal(kv.Value, &w); err != nil {
			s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", kv.Key, err))
			continue
		}
		s.weps = append(s.weps, &w)
	}
	return s, nil
}

func (s *snapshot) addIPAM(key string, kv *mvccpbKV) {
	bad := func(err error) { s.unreadable = append(s.unreadable, fmt.Sprintf("%s: %v", key, err)) }
	switch {
	case strings.HasPrefix(key, blockPrefix):
		b, err := decodeBlock(kv.Value)
		if err != nil {
			bad(err)
			return
		}
		if p, err := parseBlockKey(key); err != nil || p != b.prefix {
			bad(fmt.Errorf("%w: key does not match cidr %s", ErrCorrupt, b.CIDR))
			return
		}
		s.blocks[key] = blockKV{b: b, rev: kv.ModRevision}
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
	out := map[string]*handleRec{}
	for _, key := range s.sortedBlocks() {
		b := s.blocks[key].b
		for o := range b.Allocations {
			hold := b.holder(o)
			if hold == nil {
				continue
			}
			h := out[hold.Handle]
			if h == nil {
				h = &handleRec{ID: hold.Handle, Blocks: map[string][]int{}}
				out[hold.Handle] = h
			}
			h.Blocks[b.CIDR] = append(h.Blocks[b.CIDR], o)
		}
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
