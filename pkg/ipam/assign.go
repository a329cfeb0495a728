package ipam

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Attributes describe what an allocation is for.
type Attributes struct {
	Namespace string
	Pod       string
	// Type is TypePod (the default) or TypeTunnel.
	Type string
}

// AssignArgs is a request for addresses.
type AssignArgs struct {
	// Node is the node the addresses are for; its own blocks are used
	// first.
	Node string
	// HandleID names the holder: PodHandle(network, containerID) for pods,
	// TunnelHandle(node) for a tunnel address.
	HandleID string
	// Num is how many addresses the handle should hold in the pools (0
	// means 1).
	Num int
	// Pools restricts allocation to these pools, by name or CIDR, in order
	// of preference. Empty means every pool, by name.
	Pools []string
	// Family is 4 or 6: the address family to assign from (0 means 4).
	// A handle may hold addresses of both families: each family's
	// AutoAssign counts only the addresses the handle holds in pools of
	// that family.
	Family int
	// IP asks for one specific address instead (see AssignIP).
	IP    netip.Addr
	Attrs Attributes
	// Extra, when set, is written in the transaction that completes the
	// assignment; when the handle already holds the addresses (a retried
	// ADD), in a transaction that requires the handle unchanged. Either
	// way it is written once the call succeeds, and never with addresses
	// the handle does not hold.
	Extra Extra
}

func (a Attributes) record(handle, node string) (attribute, error) {
	t := a.Type
	if t == "" {
		t = TypePod
	}
	if t != TypePod && t != TypeTunnel {
		return attribute{}, fmt.Errorf("%w: allocation type %q (want %q or %q)", ErrInvalidArgument, t, TypePod, TypeTunnel)
	}
	return attribute{Handle: handle, Namespace: a.Namespace, Pod: a.Pod, Node: node, Type: t}, nil
}

// AutoAssign makes sure the handle holds args.Num addresses in the
// eligible pools and returns them. A handle that already holds addresses
// there (a retried CNI ADD) gets those back rather than new ones.
//
// Addresses come from the node's own blocks first; when they are full the
// node claims a new block, and when it cannot (no unclaimed block, at
// maxBlocksPerHost, or autoAllocateBlocks false) it borrows single
// addresses from other nodes' blocks unless strictAffinity is set.
// Failing that the error wraps ErrExhausted and names the pools.
//
// On error the handle may hold some of the addresses (those returned);
// the caller should release the handle.
func (c *Client) AutoAssign(ctx context.Context, args AssignArgs) ([]netip.Addr, error) {
	if err := checkName("node", args.Node); err != nil {
		return nil, err
	}
	if err := checkName("handle", args.HandleID); err != nil {
		return nil, err
	}
	attr, err := args.Attrs.record(args.HandleID, args.Node)
	if err != nil {
		return nil, err
	}
	num := args.Num
	if num == 0 {
		num = 1
	}
	if num < 0 || (args.IP.IsValid() && num != 1) {
		return nil, fmt.Errorf("%w: num %d (a specific IP is one address)", ErrInvalidArgument, args.Num)
	}
	family := args.Family
	if family == 0 {
		family = 4
	}
	if family != 4 && family != 6 {
		return nil, fmt.Errorf("%w: family %d (want 4 or 6)", ErrInvalidArgument, args.Family)
	}
	if args.IP.IsValid() && args.Family != 0 && familyOf(netip.PrefixFrom(args.IP, 0)) != family {
		return nil, fmt.Errorf("%w: %s is not an IPv%d address", ErrInvalidArgument, args.IP, family)
	}
	if args.IP.IsValid() {
		if err := c.AssignIP(ctx, args.IP, args.HandleID, args.Node, args.Attrs); err != nil {
			return nil, err
		}
		if args.Extra != nil {
			hkey := handleKey(args.HandleID)
			_, hrev, err := c.readHandle(ctx, hkey)
			if err != nil {
				return nil, err
			}
			if err := c.writeExtraHeld(ctx, hkey, hrev, []netip.Addr{args.IP}, args.Extra); err != nil {
				return nil, err
			}
		}
		return []netip.Addr{args.IP}, nil
	}
	ns, unlock, err := c.lockNode(ctx, args.Node)
	if err != nil {
		return nil, err
	}
	defer unlock()
	a := &assigner{c: c, ns: ns, node: args.Node, hkey: handleKey(args.HandleID), num: num, want: args.Pools, family: family, attr: attr, extra: args.Extra,
		tries: c.retries(fmt.Sprintf("allocating for node %q handle %q", args.Node, args.HandleID))}
	return a.run(ctx)
}

// assigner carries one AutoAssign call through its retries. It runs
// while holding the node's lock, so it may use and update ns freely.
type assigner struct {
	c    *Client
	ns   *nodeState
	node string
	hkey string
	num  int
	want []string
	// family is 4 or 6: only pools of it are eligible.
	family int
	attr   attribute
	// extra is written with the assignment; extraDone once it was.
	extra     Extra
	extraDone bool

	pools []*poolInfo
	// view is the pool view pools came from; its reservations say which
	// free addresses may not be handed out.
	view *clusterView
	// h and hrev are what we believe the handle is; a wrong belief only
	// costs a failed write, which returns the truth.
	h    *handleRec
	hrev int64
	// hKnown is set once h was read from etcd during this call.
	hKnown bool
	// snap is set by a refresh and cleared when it may be out of date.
	snap *nodeSnap
	// tries is the call's retry budget, started once the node is locked.
	tries *retries
	// sinceRefresh counts lost writes since the last refresh.
	sinceRefresh int
}

func (a *assigner) run(ctx context.Context) ([]netip.Addr, error) {
	// The handle is assumed absent (a new CNI ADD) rather than read: the
	// first write checks that, and if it fails it returns the handle. A
	// cached copy is not trusted here, since returning addresses from a
	// stale copy would hand out addresses the handle no longer holds.
	if err := a.load(ctx); err != nil {
		return nil, err
	}
	for {
		held := a.held()
		if len(held) >= a.num {
			if a.extra != nil && !a.extraDone {
				// Already held before this call (a retried ADD): the
				// handle was read, so a.h and a.hrev are its state.
				if err := a.c.writeExtraHeld(ctx, a.hkey, a.hrev, held, a.extra); err != nil {
					return held, err
				}
			}
			return held, nil
		}
		// Every round either writes or learns something, so this only
		// trips if the datastore keeps changing under us.
		if err := a.tries.spent(); err != nil {
			return held, err
		}
		key, pool, err := a.pickBlock(ctx)
		if err != nil {
			return held, err
		}
		if key == "" {
			continue // state changed (refresh or claim): look again
		}
		ok, err := a.commit(ctx, key, pool, a.num-len(held))
		if err != nil {
			return held, err
		}
		if !ok {
			slept, err := a.tries.lost(ctx)
			if err != nil {
				return a.held(), err
			}
			if a.sinceRefresh++; slept || a.sinceRefresh >= 2 {
				// One lost write is a race: the failed write returned the
				// block's current state, so retrying at once is right. Two
				// in a row suggest the cached copies of the node's other
				// blocks are stale too (other processes write them), and
				// after a sleep everything is: re-read them all at once
				// rather than discover that one conflict at a time.
				a.c.blocks.drop(key)
				if err := a.refresh(ctx); err != nil {
					return a.held(), err
				}
			}
		}
	}
}

// load sets up the pool list from the cache, refreshing when the cache is
// empty or does not satisfy the request.
func (a *assigner) load(ctx context.Context) error {
	view := a.c.view.Load()
	if view == nil || !a.ns.niKnown || a.ns.own == nil || a.ns.epoch != a.c.epoch.Load() {
		return a.refresh(ctx)
	}
	pools, err := view.eligible(a.node, a.ns.ni, a.want, a.family)
	if err != nil {
		if a.c.watched {
			return err // the view is current: Invalidate would have dropped it
		}
		return a.refresh(ctx) // maybe a pool was created or changed since
	}
	a.pools, a.view = pools, view
	return nil
}

func (a *assigner) refresh(ctx context.Context) error {
	// Read the epoch first: an Invalidate during the read must not be
	// taken as covered by it.
	epoch := a.c.epoch.Load()
	s, err := a.c.refresh(ctx, a.node)
	if err != nil {
		return err
	}
	a.snap, a.sinceRefresh, a.view = s, 0, s.view
	a.ns.ni, a.ns.niKnown, a.ns.epoch = s.node, true, epoch
	a.ns.own = s.ownBlocks()
	if err := a.c.fetchBlocks(ctx, a.ns.own, s.blockRevs); err != nil {
		return err
	}
	a.pools, err = s.view.eligible(a.node, s.node, a.want, a.family)
	return err
}

func (a *assigner) readHandle(ctx context.Context) error {
	resp, err := a.c.get(ctx, a.hkey)
	if err != nil {
		return err
	}
	kv := firstKV(resp.Kvs)
	if a.h, err = a.c.storeHandleKV(a.hkey, kv); err != nil {
		return err
	}
	a.hrev, a.hKnown = modRev(kv), true
	return nil
}

// held lists the addresses the handle holds in the eligible pools.
func (a *assigner) held() []netip.Addr { return a.heldIn(a.h) }

// heldIn lists the addresses h holds in the eligible pools.
func (a *assigner) heldIn(h *handleRec) []netip.Addr {
	if h == nil {
		return nil
	}
	var out []netip.Addr
	for cidr, ords := range h.Blocks {
		p, err := netip.ParsePrefix(cidr)
		if err != nil || poolOfBlock(a.pools, p) == nil {
			continue
		}
		for _, o := range ords {
			out = append(out, addrAt(p, o))
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// pickBlock finds a block with a free address: an own block, else (after
// re-reading) a newly claimed one, else a borrowed one. An empty key with
// no error means "state changed, ask again".
func (a *assigner) pickBlock(ctx context.Context) (string, *poolInfo, error) {
	if key, pool := a.ownWithSpace(); key != "" {
		return key, pool, nil
	}
	if a.snap == nil {
		return "", nil, a.refresh(ctx)
	}
	if !a.hKnown {
		// Before claiming or borrowing, make sure this is not a retry of
		// a request the handle already has addresses for.
		return "", nil, a.readHandle(ctx)
	}
	progressed, err := a.c.finishPendingClaims(ctx, a.node, a.snap, a.pools, a.tries)
	if err != nil || progressed {
		a.snap = nil
		return "", nil, err
	}
	why := a.claimBlocked()
	if why == "" {
		key, err := a.c.claimNext(ctx, a.node, a.pools, a.snap, a.snap.view.cfg.MaxBlocksPerHost > 0, a.tries)
		switch {
		case err == nil:
			a.ns.own = append(a.ns.own, key)
			a.snap = nil
			return "", nil, nil
		case errors.Is(err, errRecount):
			a.snap = nil
			_, err := a.tries.lost(ctx)
			return "", nil, err
		case !errors.Is(err, errNoFreeBlock):
			return "", nil, err
		}
	}
	if a.snap.view.cfg.StrictAffinity {
		return "", nil, a.exhausted(why, "strictAffinity forbids borrowing")
	}
	key, pool, err := a.borrowable(ctx)
	if err != nil || key == "" {
		return "", nil, errors.Join(err, a.exhaustedIf(err == nil, why))
	}
	return key, pool, nil
}

func (a *assigner) exhaustedIf(yes bool, why string) error {
	if !yes {
		return nil
	}
	return a.exhausted(why)
}

// ownWithSpace returns a cached own block with a free address.
func (a *assigner) ownWithSpace() (string, *poolInfo) {
	for _, key := range a.ns.own {
		b, _, ok := a.c.blocks.get(key)
		if !ok || b.owner() != a.node {
			continue // evicted or released: the next refresh sorts it out
		}
		if pool := poolOfBlock(a.pools, b.prefix); pool != nil && a.view.reserved.usable(b) > 0 {
			return key, pool
		}
	}
	return "", nil
}

// claimBlocked says why the node may not claim another block, or "".
func (a *assigner) claimBlocked() string {
	v := a.snap.view
	if !v.autoAllocate() {
		return "autoAllocateBlocks is false"
	}
	if m := v.cfg.MaxBlocksPerHost; m > 0 && len(a.snap.affs) >= m {
		return fmt.Sprintf("node holds %d blocks, maxBlocksPerHost is %d", len(a.snap.affs), m)
	}
	return ""
}

// borrowable returns a block of another node, in an eligible pool, with a
// free address. It scans all blocks once and then uses what it found
// until those are full.
func (a *assigner) borrowable(ctx context.Context) (string, *poolInfo, error) {
	for round := 0; round < 2; round++ {
		if err := a.c.fetchMissing(ctx, a.ns.borrow); err != nil {
			return "", nil, err
		}
		var cands []string
		for _, key := range a.ns.borrow {
			if b, _, ok := a.c.blocks.get(key); ok && a.view.reserved.usable(b) > 0 && b.owner() != a.node && poolOfBlock(a.pools, b.prefix) != nil {
				cands = append(cands, key)
			}
		}
		if len(cands) > 0 {
			// Prefer the most preferred pool; pick randomly inside it so
			// that borrowers spread over blocks instead of colliding.
			sort.SliceStable(cands, func(i, j int) bool { return a.poolRank(cands[i]) < a.poolRank(cands[j]) })
			best := a.poolRank(cands[0])
			n := sort.Search(len(cands), func(i int) bool { return a.poolRank(cands[i]) > best })
			key := cands[rand.IntN(n)]
			b, _, _ := a.c.blocks.get(key)
			return key, poolOfBlock(a.pools, b.prefix), nil
		}
		if round == 1 {
			break
		}
		if err := a.scanForeign(ctx); err != nil {
			return "", nil, err
		}
	}
	return "", nil, nil
}

func (a *assigner) poolRank(key string) int {
	b, _, _ := a.c.blocks.get(key)
	if b == nil {
		return len(a.pools)
	}
	return slices.Index(a.pools, poolOfBlock(a.pools, b.prefix))
}

func (a *assigner) scanForeign(ctx context.Context) error {
	resp, err := a.c.get(ctx, blockPrefix, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	a.ns.borrow = a.ns.borrow[:0]
	for _, kv := range resp.Kvs {
		b := a.c.storeBlockKV(string(kv.Key), kv)
		if b != nil && b.owner() != a.node && a.view.reserved.usable(b) > 0 && poolOfBlock(a.pools, b.prefix) != nil {
			a.ns.borrow = append(a.ns.borrow, string(kv.Key))
		}
	}
	return nil
}

// exhausted builds the error for a request nothing can satisfy, naming
// the pools and, when it is configuration that stands in the way, why.
func (a *assigner) exhausted(why ...string) error {
	names := make([]string, len(a.pools))
	for i, p := range a.pools {
		names[i] = fmt.Sprintf("%q (%s)", p.name(), p.prefix)
	}
	what := "pool " + names[0]
	if len(names) > 1 {
		what = "pools " + strings.Join(names, ", ")
	}
	var hints []string
	for _, w := range why {
		if w != "" {
			hints = append(hints, w)
		}
	}
	msg := fmt.Sprintf("%s exhausted for node %q", what, a.node)
	if len(hints) > 0 {
		msg += " (" + strings.Join(hints, "; ") + ")"
	}
	return fmt.Errorf("%w: %s", ErrExhausted, msg)
}

// commit allocates up to n addresses from the cached copy of block key
// and records them in the handle, in one transaction that also checks the
// pool and the node have not changed. It reports false when another
// writer got there first; the caches then hold the current state.
func (a *assigner) commit(ctx context.Context, key string, pool *poolInfo, n int) (bool, error) {
	b, rev, ok := a.c.blocks.get(key)
	if !ok {
		return false, nil
	}
	now := a.c.now()
	nb := b.clone()
	var ords []int
	reserved := a.view.reserved.in(b.prefix).ordinals(b.prefix)
	for range n {
		o, ok := nb.allocateSkipping(reserved, a.attr, now)
		if !ok {
			break
		}
		ords = append(ords, o)
	}
	if len(ords) == 0 {
		return false, nil // reserved since it was picked: pick again
	}
	nh := &handleRec{ID: a.attr.Handle, Blocks: map[string][]int{}}
	if a.h != nil {
		nh = a.h.clone()
	}
	nh.add(nb.CIDR, ords...)
	ews, err := extraWrites(a.extra, a.heldIn(nh))
	if err != nil {
		return false, err
	}
	pkey, nkey := poolKey(pool.name()), nodeKey(a.node)
	res, err := a.c.cas(ctx, append([]write{
		{key: key, rev: rev, val: nb.encode()},
		{key: a.hkey, rev: a.hrev, val: nh.encode()},
		{key: pkey, rev: pool.rev, guard: true},
		{key: nkey, rev: a.ns.ni.rev, guard: true},
	}, ews...), reservedGuard(a.view.rev))
	if err != nil {
		return false, err
	}
	if res.ok {
		a.c.blocks.put(key, nb, res.rev)
		a.c.handles.put(a.hkey, nh, res.rev)
		a.h, a.hrev, a.hKnown = nh, res.rev, true
		if a.extra != nil {
			a.extraDone = true
			committedExtra(a.extra, res.rev)
		}
		return true, nil
	}
	if err := observeExtra(a.extra, ews, res); err != nil {
		return false, err
	}
	hrev := a.hrev
	a.c.storeBlockKV(key, res.cur[key])
	if a.h, err = a.c.storeHandleKV(a.hkey, res.cur[a.hkey]); err != nil {
		return false, err
	}
	a.hrev, a.hKnown = modRev(res.cur[a.hkey]), true
	if modRev(res.cur[pkey]) != pool.rev || modRev(res.cur[nkey]) != a.ns.ni.rev {
		// The pool or the node's labels changed: re-evaluate eligibility.
		return false, a.refresh(ctx)
	}
	if modRev(res.cur[key]) == rev && a.hrev == hrev {
		// Nothing written here changed: a reservation did
		// (reservedGuard). Read them again with the pools.
		return false, a.refresh(ctx)
	}
	return false, nil
}
