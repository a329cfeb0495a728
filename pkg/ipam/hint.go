package ipam

import (
	"context"
	"slices"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxHinted bounds how many hinted blocks a refresh reads.
const maxHinted = 32

// WithBlockHint names blocks (by key, as OwnBlocks returns them) that a
// client which starts with an empty cache should read in its first
// round trip, with the pools and the node's affinities, instead of in a
// second one once the affinities have named them: the CNI plugin's
// per-verb client keeps the node's blocks from one call to the next
// this way (cniplugin/ipamcore). A wrong hint costs nothing but the
// read: ownership still comes from the affinities read with it, and
// every write compares revisions. Keys that are not block keys are
// ignored.
func WithBlockHint(keys []string) Option {
	return func(c *Client) {
		c.hint = nil
		for _, k := range keys {
			if _, err := parseBlockKey(k); err == nil && strings.HasPrefix(k, blockPrefix) && len(c.hint) < maxHinted {
				c.hint = append(c.hint, k)
			}
		}
	}
}

// hintOps are the reads of the hinted blocks, for a refresh.
func (c *Client) hintOps() []clientv3.Op {
	ops := make([]clientv3.Op, len(c.hint))
	for i, k := range c.hint {
		ops[i] = clientv3.OpGet(k)
	}
	return ops
}

// storeHinted caches the hinted blocks from a refresh's responses to
// hintOps.
func (c *Client) storeHinted(rs []*pb.ResponseOp) {
	for i, k := range c.hint {
		if i < len(rs) {
			c.storeBlockKV(k, firstKV(rs[i].GetResponseRange().Kvs))
		}
	}
}

// OwnBlocks returns the keys of the blocks this client knows node to
// hold a confirmed affinity for, sorted (nil before it allocated for the
// node): what WithBlockHint takes.
func (c *Client) OwnBlocks(ctx context.Context, node string) ([]string, error) {
	ns, unlock, err := c.lockNode(ctx, node)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := slices.Clone(ns.own)
	slices.Sort(out)
	return out, nil
}
