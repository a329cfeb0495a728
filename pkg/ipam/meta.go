package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// clusterView is the pool list and IPAM configuration at one revision.
// It is immutable once built.
type clusterView struct {
	rev    int64
	pools  []*poolInfo // sorted by name
	cfg    api.IPAMConfigurationSpec
	cfgRev int64
	// reserved is every IPReservation's prefixes (reserved.go).
	reserved reservedSet
}

func (v *clusterView) autoAllocate() bool {
	return v.cfg.AutoAllocateBlocks == nil || *v.cfg.AutoAllocateBlocks
}

func (v *clusterView) poolByRef(ref string) *poolInfo {
	pfx, perr := netip.ParsePrefix(ref)
	for _, p := range v.pools {
		if p.name() == ref || (perr == nil && p.prefix == pfx.Masked()) {
			return p
		}
	}
	return nil
}

// nodeInfo is one node's labels and the revision of its record (0 when
// the Node does not exist: it then has no labels).
type nodeInfo struct {
	labels map[string]string
	rev    int64
}

// eligible returns the pools a request may allocate from, in preference
// order: the requested pools in the order given, or every pool by name.
// Disabled pools and pools whose nodeSelector does not select the node are
// skipped; if none is left the error says why for each.
func (v *clusterView) eligible(node string, ni nodeInfo, want []string, family int) ([]*poolInfo, error) {
	var cands []*poolInfo
	for _, p := range v.pools {
		if familyOf(p.prefix) == family {
			cands = append(cands, p)
		}
	}
	if len(want) > 0 {
		cands = nil
		for _, ref := range want {
			p := v.poolByRef(ref)
			if p == nil {
				return nil, fmt.Errorf("%w for node %q: requested pool %q does not exist", ErrNoPool, node, ref)
			}
			if familyOf(p.prefix) != family {
				return nil, fmt.Errorf("%w: requested pool %q (%s) is not an IPv%d pool; name IPv4 pools in ipv4_pools/ipv4pools and IPv6 pools in ipv6_pools/ipv6pools", ErrInvalidArgument, ref, p.prefix, family)
			}
			if !slices.Contains(cands, p) {
				cands = append(cands, p)
			}
		}
	}
	var out []*poolInfo
	var why []string
	for _, p := range cands {
		switch {
		case p.pool.Spec.Disabled:
			why = append(why, p.describe()+" is disabled")
		case !p.sel.SelectsNode(ni.labels):
			why = append(why, fmt.Sprintf("%s: nodeSelector %q does not select the node", p.describe(), p.pool.Spec.NodeSelector))
		default:
			out = append(out, p)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if len(why) == 0 {
		why = []string{fmt.Sprintf("no IPv%d pools exist", family)}
	}
	return nil, fmt.Errorf("%w for node %q: %s", ErrNoPool, node, strings.Join(why, "; "))
}

// nodeSnap is what the slow path of an allocation reads about a node, all
// at one revision.
type nodeSnap struct {
	view *clusterView
	node nodeInfo
	// affs are the node's affinities by block key.
	affs map[string]affKV
	// blockRevs holds the ModRevision of every existing block key (-1:
	// taken since, or a summary stored without its block).
	blockRevs map[string]int64
	// orphansRead: the summaries stored without their blocks are in
	// blockRevs (skipOrphans).
	orphansRead bool
	rev         int64
}

type affKV struct {
	node string
	cidr netip.Prefix
	rec  affinityRec
	rev  int64
}

// refresh reads, in one round trip, everything an allocation for node
// needs beyond the blocks themselves, and stores the pool view in the
// cache.
func (c *Client) refresh(ctx context.Context, node string) (*nodeSnap, error) {
	ops := []clientv3.Op{
		clientv3.OpGet(datastore.KindPrefix(api.KindIPPool), clientv3.WithPrefix()),
		clientv3.OpGet(ipamConfigKey()),
		clientv3.OpGet(nodeKey(node)),
		clientv3.OpGet(nodeAffinityPrefix(node), clientv3.WithPrefix()),
		clientv3.OpGet(blockPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
		reservationsOp(),
	}
	resp, err := c.readMany(ctx, append(ops, c.hintOps()...)...)
	if err != nil {
		return nil, err
	}
	r := resp.Responses
	c.storeHinted(r[len(ops):])
	view := buildView(resp.Header.Revision, r[0].GetResponseRange().Kvs, r[1].GetResponseRange().Kvs, r[5].GetResponseRange().Kvs)
	c.view.Store(view)
	s := &nodeSnap{view: view, rev: resp.Header.Revision, affs: map[string]affKV{}, blockRevs: map[string]int64{}}
	if kvs := r[2].GetResponseRange().Kvs; len(kvs) > 0 {
		n, err := decodeNode(kvs[0].Value)
		if err != nil {
			return nil, fmt.Errorf("%w: node %q: %w", ErrCorrupt, node, err)
		}
		s.node = nodeInfo{labels: n.Metadata.Labels, rev: kvs[0].ModRevision}
	}
	for _, kv := range r[3].GetResponseRange().Kvs {
		a, err := parseAffinityKV(string(kv.Key), kv.Value, kv.ModRevision)
		if err != nil {
			log.WithError(err).Warn("skipping unreadable affinity")
			continue
		}
		s.affs[blockKey(a.cidr)] = a
	}
	for _, kv := range r[4].GetResponseRange().Kvs {
		s.blockRevs[string(kv.Key)] = kv.ModRevision
	}
	return s, nil
}

func parseAffinityKV(key string, val []byte, rev int64) (affKV, error) {
	node, cidr, err := parseAffinityKey(key)
	if err != nil {
		return affKV{}, err
	}
	rec, err := decodeAffinity(val)
	if err != nil {
		return affKV{}, fmt.Errorf("affinity %s: %w", key, err)
	}
	return affKV{node: node, cidr: cidr, rec: rec, rev: rev}, nil
}

// buildView decodes pools (skipping unreadable ones, loudly), the
// IPAM configuration and the IP reservations.
func buildView(rev int64, poolKVs, cfgKVs, reservedKVs []*mvccpbKV) *clusterView {
	v := &clusterView{rev: rev, reserved: decodeReservations(reservedKVs)}
	for _, kv := range poolKVs {
		p, err := decodePool(kv.Value, kv.ModRevision)
		if err != nil {
			log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable IP pool")
			continue
		}
		v.pools = append(v.pools, p)
	}
	if len(cfgKVs) > 0 {
		cfg, err := decodeIPAMConfig(cfgKVs[0].Value)
		if err != nil {
			log.WithError(err).Warn("unreadable IPAMConfiguration; using defaults")
		}
		v.cfg, v.cfgRev = cfg, cfgKVs[0].ModRevision
	}
	return v
}

// ownBlocks lists the keys of the blocks s says the node holds a
// confirmed affinity for, ordered by pool preference then address.
func (s *nodeSnap) ownBlocks() []string {
	var out []string
	for _, p := range s.view.pools {
		var keys []netip.Prefix
		for _, a := range s.affs {
			if a.rec.State == StateConfirmed && p.prefix.Contains(a.cidr.Addr()) {
				keys = append(keys, a.cidr)
			}
		}
		slices.SortFunc(keys, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
		for _, k := range keys {
			out = append(out, blockKey(k))
		}
	}
	return out
}

// fetchBlocks makes sure the cache holds every block in keys at the
// revision given, reading those that are missing or older in one round
// trip per 100 keys.
func (c *Client) fetchBlocks(ctx context.Context, keys []string, revs map[string]int64) error {
	var need []string
	for _, k := range keys {
		if _, rev, ok := c.blocks.get(k); !ok || rev != revs[k] {
			need = append(need, k)
		}
	}
	for len(need) > 0 {
		n := min(len(need), 100) // etcd allows 128 operations per txn
		ops := make([]clientv3.Op, n)
		for i, k := range need[:n] {
			ops[i] = clientv3.OpGet(k)
		}
		resp, err := c.readMany(ctx, ops...)
		if err != nil {
			return err
		}
		for i, k := range need[:n] {
			c.storeBlockKV(k, firstKV(resp.Responses[i].GetResponseRange().Kvs))
		}
		need = need[n:]
	}
	return nil
}

// storeBlockKV caches a block read from etcd; kv nil means it is gone.
func (c *Client) storeBlockKV(key string, kv *mvccpbKV) *block {
	if kv == nil {
		c.blocks.drop(key)
		return nil
	}
	b, err := decodeBlock(kv.Value)
	if err != nil {
		log.WithError(err).WithField("key", key).Error("unreadable IPAM block")
		c.blocks.drop(key)
		return nil
	}
	c.blocks.put(key, b, kv.ModRevision)
	return b
}

// storeHandleKV caches a handle read from etcd; kv nil means it is gone.
func (c *Client) storeHandleKV(key string, kv *mvccpbKV) (*handleRec, error) {
	if kv == nil {
		c.handles.drop(key)
		return nil, nil
	}
	h, err := decodeHandle(kv.Value)
	if err != nil {
		c.handles.drop(key)
		return nil, fmt.Errorf("handle %s: %w", key, err)
	}
	c.handles.put(key, h, kv.ModRevision)
	return h, nil
}

func firstKV(kvs []*mvccpbKV) *mvccpbKV {
	if len(kvs) == 0 {
		return nil
	}
	return kvs[0]
}
