package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ReleaseByHandle frees every address the handle holds and deletes the
// handle, in one transaction. An unknown handle is not an error (CNI DEL
// may run many times); it returns what it freed.
func (c *Client) ReleaseByHandle(ctx context.Context, handle string) ([]netip.Addr, error) {
	return c.ReleaseByHandleWith(ctx, handle, nil)
}

// ReleaseByHandleWith is ReleaseByHandle that also writes extra (when
// not nil) in the same transaction, even when the handle holds nothing:
// routed's CNI service deletes a pod's WorkloadEndpoint with its
// addresses this way.
func (c *Client) ReleaseByHandleWith(ctx context.Context, handle string, extra Extra) ([]netip.Addr, error) {
	if err := checkName("handle", handle); err != nil {
		return nil, err
	}
	hkey := handleKey(handle)
	h, hrev, ok := c.handles.get(hkey)
	if !ok {
		var err error
		if h, hrev, err = c.readHandle(ctx, hkey); err != nil {
			return nil, err
		}
	}
	tries := c.releaseRetries(fmt.Sprintf("releasing handle %q", handle))
	for {
		if h == nil && extra == nil {
			return nil, nil
		}
		var held map[string][]int // nil: the handle is gone
		if h != nil {
			held = h.Blocks
		}
		keys := make([]string, 0, len(held))
		for cidr := range held {
			p, err := netip.ParsePrefix(cidr)
			if err != nil {
				return nil, fmt.Errorf("%w: handle %q names block %q", ErrCorrupt, handle, cidr)
			}
			keys = append(keys, blockKey(p))
		}
		sort.Strings(keys)
		if err := c.fetchMissing(ctx, keys); err != nil {
			return nil, err
		}
		var ws []write
		var freed []netip.Addr
		newBlocks := map[string]*block{}
		now := c.now()
		for _, key := range keys {
			b, rev, ok := c.blocks.get(key)
			if !ok {
				ws = append(ws, write{key: key, rev: 0, guard: true}) // gone: nothing to free
				continue
			}
			nb := b.clone()
			for _, o := range held[b.CIDR] {
				if hold := nb.holder(o); hold != nil && hold.Handle == handle {
					nb.release(o, now)
					freed = append(freed, nb.addr(o))
				}
			}
			if nb.SequenceNumber == b.SequenceNumber {
				ws = append(ws, write{key: key, rev: rev, guard: true})
				continue
			}
			newBlocks[key] = nb
			ws = append(ws, write{key: key, rev: rev, val: nb.encode()})
		}
		nblocks := len(ws)
		ws = append(ws, write{key: hkey, rev: hrev})
		ews, err := extraWrites(extra, nil)
		if err != nil {
			return nil, err
		}
		res, err := c.cas(ctx, append(ws, ews...))
		if err != nil {
			return nil, err
		}
		if res.ok {
			if extra != nil {
				committedExtra(extra, res.rev)
			}
			for key, nb := range newBlocks {
				c.blocks.put(key, nb, res.rev)
			}
			c.handles.drop(hkey)
			slices.SortFunc(freed, netip.Addr.Compare)
			return freed, nil
		}
		for _, w := range ws[:nblocks] {
			c.storeBlockKV(w.key, res.cur[w.key])
		}
		if err := observeExtra(extra, ews, res); err != nil {
			return nil, err
		}
		if h, err = c.storeHandleKV(hkey, res.cur[hkey]); err != nil {
			return nil, err
		}
		hrev = modRev(res.cur[hkey])
		slept, err := tries.lost(ctx)
		if err != nil {
			return nil, err
		}
		if slept {
			for _, k := range keys {
				c.blocks.drop(k)
			}
			if h, hrev, err = c.readHandle(ctx, hkey); err != nil {
				return nil, err
			}
		}
	}
}

// readHandle reads a handle record (nil if absent) and caches it.
func (c *Client) readHandle(ctx context.Context, hkey string) (*handleRec, int64, error) {
	resp, err := c.get(ctx, hkey)
	if err != nil {
		return nil, 0, err
	}
	kv := firstKV(resp.Kvs)
	h, err := c.storeHandleKV(hkey, kv)
	return h, modRev(kv), err
}

// fetchMissing reads the blocks among keys that are not cached.
func (c *Client) fetchMissing(ctx context.Context, keys []string) error {
	revs := map[string]int64{}
	for _, k := range keys {
		if _, rev, ok := c.blocks.get(k); ok {
			revs[k] = rev
		}
	}
	return c.fetchBlocks(ctx, keys, revs)
}

// Release names one address to free. A non-zero Seq must match the
// allocation's sequence number (from IPInfo), or the release is refused
// with a *StaleSequenceError: the address has been freed and possibly
// reallocated since it was looked at.
type Release struct {
	IP  netip.Addr
	Seq uint64
}

// ReleaseIPs frees addresses and removes them from their handles. Free
// addresses and addresses outside every block are skipped. It returns
// what it freed; stale releases are skipped and reported in the error
// (errors.As finds each *StaleSequenceError).
func (c *Client) ReleaseIPs(ctx context.Context, rels ...Release) ([]netip.Addr, error) {
	byBlock := map[string][]Release{}
	for _, r := range rels {
		key, err := c.blockKeyFor(ctx, r.IP)
		if err != nil {
			return nil, err
		}
		if key != "" {
			byBlock[key] = append(byBlock[key], r)
		}
	}
	keys := make([]string, 0, len(byBlock))
	for k := range byBlock {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var freed []netip.Addr
	var errs []error
	for _, key := range keys {
		f, err := c.releaseInBlock(ctx, key, byBlock[key])
		freed = append(freed, f...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	slices.SortFunc(freed, netip.Addr.Compare)
	return freed, errors.Join(errs...)
}

// releaseInBlock frees rels, all in block key, together with the handle
// records that list them, in one transaction per attempt.
func (c *Client) releaseInBlock(ctx context.Context, key string, rels []Release) ([]netip.Addr, error) {
	// Judge "free" and "stale" on a fresh read: a stale cached copy would
	// refuse or skip releases that are valid now, and neither case writes
	// anything that would expose the staleness.
	c.blocks.drop(key)
	tries := c.releaseRetries("releasing addresses in block " + key)
	for {
		b, rev, err := c.cachedBlock(ctx, key)
		if err != nil || b == nil {
			return nil, err
		}
		nb := b.clone()
		now := c.now()
		var stale []error
		var freed []netip.Addr
		owners := map[string][]int{} // handle -> ordinals freed
		for _, r := range rels {
			o, ok := nb.ordinal(r.IP)
			hold := nb.holder(o)
			if !ok || hold == nil {
				continue
			}
			if r.Seq != 0 && nb.Seq[o] != r.Seq {
				stale = append(stale, &StaleSequenceError{IP: r.IP, Want: r.Seq, Have: nb.Seq[o]})
				continue
			}
			owners[hold.Handle] = append(owners[hold.Handle], o)
			nb.release(o, now)
			freed = append(freed, r.IP)
		}
		if len(freed) == 0 {
			return nil, errors.Join(stale...)
		}
		ws := []write{{key: key, rev: rev, val: nb.encode()}}
		newHandles := map[string]*handleRec{}
		if err := c.fetchHandles(ctx, owners); err != nil {
			return nil, err
		}
		for hid, ords := range owners {
			hk := handleKey(hid)
			h, hrev, ok := c.handles.get(hk)
			if !ok { // no record (should not happen): only guard its absence
				ws = append(ws, write{key: hk, rev: 0, guard: true})
				continue
			}
			nh := h.clone()
			for _, o := range ords {
				nh.remove(nb.CIDR, o)
			}
			if nh.empty() {
				ws = append(ws, write{key: hk, rev: hrev})
				newHandles[hk] = nil
			} else {
				ws = append(ws, write{key: hk, rev: hrev, val: nh.encode()})
				newHandles[hk] = nh
			}
		}
		res, err := c.cas(ctx, ws)
		if err != nil {
			return nil, err
		}
		if res.ok {
			c.blocks.put(key, nb, res.rev)
			for hk, nh := range newHandles {
				if nh == nil {
					c.handles.drop(hk)
				} else {
					c.handles.put(hk, nh, res.rev)
				}
			}
			return freed, errors.Join(stale...)
		}
		c.storeBlockKV(key, res.cur[key])
		for _, w := range ws[1:] {
			if _, err := c.storeHandleKV(w.key, res.cur[w.key]); err != nil {
				return nil, err
			}
		}
		slept, err := tries.lost(ctx)
		if err != nil {
			return nil, err
		}
		if slept {
			c.blocks.drop(key)
			for _, w := range ws[1:] {
				c.handles.drop(w.key)
			}
		}
	}
}

// fetchHandles makes sure the cache holds the handles named in owners,
// reading the missing ones in one round trip.
func (c *Client) fetchHandles(ctx context.Context, owners map[string][]int) error {
	var need []string
	for hid := range owners {
		if _, _, ok := c.handles.get(handleKey(hid)); !ok {
			need = append(need, handleKey(hid))
		}
	}
	if len(need) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, len(need))
	for i, k := range need {
		ops[i] = clientv3.OpGet(k)
	}
	resp, err := c.readMany(ctx, ops...)
	if err != nil {
		return err
	}
	for i, k := range need {
		if _, err := c.storeHandleKV(k, firstKV(resp.Responses[i].GetResponseRange().Kvs)); err != nil {
			return err
		}
	}
	return nil
}

// blockKeyFor returns the key of the block that would hold ip, or "" if
// ip is in no pool and no block.
func (c *Client) blockKeyFor(ctx context.Context, ip netip.Addr) (string, error) {
	if p, err := c.poolFor(ctx, ip, false); err == nil {
		return blockKey(p.blockFor(ip)), nil
	} else if !errors.Is(err, ErrNotInPool) {
		return "", err
	}
	// The pool may have been deleted while its blocks remain.
	resp, err := c.get(ctx, blockPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return "", err
	}
	for _, kv := range resp.Kvs {
		if p, err := parseBlockKey(string(kv.Key)); err == nil && p.Contains(ip) {
			return string(kv.Key), nil
		}
	}
	return "", nil
}

// IPsByHandle returns the addresses a handle holds (none for an unknown
// handle), read fresh from the datastore.
func (c *Client) IPsByHandle(ctx context.Context, handle string) ([]netip.Addr, error) {
	if err := checkName("handle", handle); err != nil {
		return nil, err
	}
	resp, err := c.get(ctx, handleKey(handle))
	if err != nil {
		return nil, err
	}
	h, err := c.storeHandleKV(handleKey(handle), firstKV(resp.Kvs))
	if err != nil || h == nil {
		return nil, err
	}
	return h.addrs(), nil
}

// addrs lists the handle's addresses, ascending.
func (h *handleRec) addrs() []netip.Addr {
	var out []netip.Addr
	for cidr, ords := range h.Blocks {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			continue
		}
		for _, o := range ords {
			out = append(out, addrAt(p, o))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
