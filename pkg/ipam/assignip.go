package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// AssignIP allocates one specific address to handle, for node. The
// address must lie in a pool; disabled pools and nodeSelectors do not
// apply, since the caller chose the address. If its block does not exist
// yet it is claimed for node. Asking again with the same handle succeeds;
// an address held by another handle fails with ErrInUse.
func (c *Client) AssignIP(ctx context.Context, ip netip.Addr, handle, node string, attrs Attributes) error {
	if err := checkName("node", node); err != nil {
		return err
	}
	if err := checkName("handle", handle); err != nil {
		return err
	}
	if !ip.IsValid() || ip.Is4In6() || ip.Zone() != "" {
		return fmt.Errorf("%w: %s is not an IPv4 or IPv6 address", ErrInvalidArgument, ip)
	}
	attr, err := attrs.record(handle, node)
	if err != nil {
		return err
	}
	_, unlock, err := c.lockNode(ctx, node)
	if err != nil {
		return err
	}
	defer unlock()

	hkey := handleKey(handle)
	var h *handleRec // assumed absent until a write says otherwise
	var hrev int64
	tries := c.retries(fmt.Sprintf("assigning %s to handle %q", ip, handle))
	for attempt := 1; ; attempt++ {
		pool, err := c.poolFor(ctx, ip, attempt > 1)
		if err != nil {
			return err
		}
		cidr := pool.blockFor(ip)
		bkey := blockKey(cidr)
		if attempt == 1 {
			// "In use" and "already ours" are answers, not writes: they
			// must come from a fresh read, not from the cache.
			c.blocks.drop(bkey)
		}
		b, rev, err := c.cachedBlock(ctx, bkey)
		if err != nil {
			return err
		}
		if b == nil {
			err := c.claimSpecific(ctx, node, cidr, tries)
			if err != nil && !errors.Is(err, errBlockTaken) {
				return err
			}
			c.blocks.drop(bkey) // re-read: it exists now, ours or not
			if attempt > 1 {
				// Still none after a claim: within the budget.
				if _, err := tries.lost(ctx); err != nil {
					return err
				}
			}
			continue
		}
		o, _ := b.ordinal(ip)
		if hold := b.holder(o); hold != nil {
			if hold.Handle == handle {
				return nil
			}
			return fmt.Errorf("%w: %s is held by handle %q (%s)", ErrInUse, ip, hold.Handle, describeHolder(hold))
		}
		nb := b.clone()
		nb.allocate(o, attr, c.now())
		nh := &handleRec{ID: handle, Blocks: map[string][]int{}}
		if h != nil {
			nh = h.clone()
		}
		nh.add(nb.CIDR, o)
		pkey := poolKey(pool.name())
		res, err := c.cas(ctx, []write{
			{key: bkey, rev: rev, val: nb.encode()},
			{key: hkey, rev: hrev, val: nh.encode()},
			{key: pkey, rev: pool.rev, guard: true},
		})
		if err != nil {
			return err
		}
		if res.ok {
			c.blocks.put(bkey, nb, res.rev)
			c.handles.put(hkey, nh, res.rev)
			c.noteReserved(ip, handle)
			return nil
		}
		c.storeBlockKV(bkey, res.cur[bkey])
		if h, err = c.storeHandleKV(hkey, res.cur[hkey]); err != nil {
			return err
		}
		hrev = modRev(res.cur[hkey])
		if slept, err := tries.lost(ctx); err != nil {
			return err
		} else if slept {
			c.blocks.drop(bkey)
		}
	}
}

func describeHolder(a *attribute) string {
	if a.Type == TypeTunnel {
		return "tunnel address of node " + a.Node
	}
	if a.Pod != "" {
		return fmt.Sprintf("pod %s/%s on node %s", a.Namespace, a.Pod, a.Node)
	}
	return "on node " + a.Node
}

// claimSpecific claims the block holding a requested address for node,
// regardless of maxBlocksPerHost and autoAllocateBlocks: an explicit
// address is an explicit request.
func (c *Client) claimSpecific(ctx context.Context, node string, cidr netip.Prefix, tries *retries) error {
	resp, err := c.get(ctx, blockKey(cidr), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if resp.Count > 0 {
		return errBlockTaken
	}
	s := &nodeSnap{rev: resp.Header.Revision}
	return c.claimBlock(ctx, node, cidr, s, false, tries)
}

// cachedBlock returns a block from the cache, reading it on a miss; nil
// if it does not exist.
func (c *Client) cachedBlock(ctx context.Context, key string) (*block, int64, error) {
	if b, rev, ok := c.blocks.get(key); ok {
		return b, rev, nil
	}
	resp, err := c.get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	kv := firstKV(resp.Kvs)
	return c.storeBlockKV(key, kv), modRev(kv), nil
}

// loadView returns the cached pool view, reading it when absent or when
// fresh is set.
func (c *Client) loadView(ctx context.Context, fresh bool) (*clusterView, error) {
	if v := c.view.Load(); v != nil && !fresh {
		return v, nil
	}
	resp, err := c.readMany(ctx,
		clientv3.OpGet(datastore.KindPrefix(api.KindIPPool), clientv3.WithPrefix()),
		clientv3.OpGet(ipamConfigKey()),
		reservationsOp())
	if err != nil {
		return nil, err
	}
	r := resp.Responses
	v := buildView(resp.Header.Revision, r[0].GetResponseRange().Kvs, r[1].GetResponseRange().Kvs, r[2].GetResponseRange().Kvs)
	c.view.Store(v)
	return v, nil
}

// poolFor returns the pool containing ip, re-reading the pools once if
// the cached list has none.
func (c *Client) poolFor(ctx context.Context, ip netip.Addr, fresh bool) (*poolInfo, error) {
	v, err := c.loadView(ctx, fresh)
	if err != nil {
		return nil, err
	}
	if p := poolContaining(v.pools, ip); p != nil {
		return p, nil
	}
	if !fresh {
		return c.poolFor(ctx, ip, true)
	}
	return nil, fmt.Errorf("%w: %s", ErrNotInPool, ip)
}
