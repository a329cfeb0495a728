package ipam

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

var log = logrus.WithField("component", "ipam")

// mvccpbKV is a stored key-value as etcd returns it.
type mvccpbKV = mvccpb.KeyValue

// Defaults for Client options.
const (
	DefaultEmptyBlockGrace = 5 * time.Minute
	// DefaultRetryBudget is how long an assignment keeps retrying writes
	// that lose to other writers (other nodes claiming blocks or
	// borrowing) before it fails with ErrContention. It is a time, not a
	// count: a busy cluster makes more writers collide, not fewer, and a
	// count that suffices for two writers fails for twenty.
	DefaultRetryBudget = 30 * time.Second
)

// Client allocates and releases pod and tunnel addresses. It is safe for
// concurrent use. It caches blocks, handles and pool/node metadata; every
// write is conditional on the revision the cached copy was read at, so a
// stale cache costs a retry, never a wrong allocation.
type Client struct {
	ds         *datastore.Client
	kv         clientv3.KV
	emptyGrace time.Duration
	budget     time.Duration
	now        func() time.Time

	blocks  *revCache[*block]
	handles *revCache[*handleRec]
	view    atomic.Pointer[clusterView]

	mu    sync.Mutex
	nodes map[string]*nodeState

	// layoutOK is set once the blocks are known to be in layout 2
	// (ensureLayout, which layoutMu serialises).
	layoutOK atomic.Bool
	layoutMu sync.Mutex

	stats counters
	// fence, when set, conditions every write on an election (GC runs on
	// the elected node only; a deposed leader must not write).
	fence *datastore.Fence
	// reclaimable says whether a node absent from the datastore may lose
	// its tunnel address (default: every absent node).
	reclaimable func(node string) bool
	// watched is set when the owner calls Invalidate on every change of
	// the pools, the IPAM configuration and the Nodes (WithWatchedPools);
	// epoch counts those calls.
	watched bool
	epoch   atomic.Uint64
	// hint lists blocks a refresh reads too (WithBlockHint).
	hint []string
	// pageLimit, when set, replaces the page sizes of GC's paged reads,
	// and afterPage runs after each page (tests: many pages, writes
	// between them).
	pageLimit int
	afterPage func(prefix string)
}

// Option configures a Client.
type Option func(*Client)

// WithEmptyBlockGrace sets how long a block must stay empty before
// ReleaseEmptyBlocks gives its affinity up (default 5m).
func WithEmptyBlockGrace(d time.Duration) Option { return func(c *Client) { c.emptyGrace = d } }

// WithRetryBudget sets how long an assignment keeps retrying conflicting
// writes before it fails with ErrContention (default DefaultRetryBudget).
// The budget starts when the operation starts, so a caller that first
// waits for a host lock does not spend it waiting. Releases are not
// bounded by it: they retry until their context ends, since giving up
// would leave the address allocated.
func WithRetryBudget(d time.Duration) Option { return func(c *Client) { c.budget = d } }

// WithFence makes every write conditional on f; a write after the
// election is lost fails with datastore.ErrFenced.
func WithFence(f datastore.Fence) Option { return func(c *Client) { c.fence = &f } }

// callFence is the context key of WithCallFence.
type callFence struct{}

// WithCallFence returns a context under which every write the Client
// makes is conditional on f too, beside the Client's own fence
// (WithFence): a node's own pass fences its writes on the cluster
// identity it judged trusted, without fencing the node's other writes.
func WithCallFence(ctx context.Context, f datastore.Fence) context.Context {
	return context.WithValue(ctx, callFence{}, f)
}

// fences are the fences of a write made under ctx: the Client's, then
// the call's.
func (c *Client) fences(ctx context.Context) []datastore.Fence {
	var fs []datastore.Fence
	if c.fence != nil {
		fs = append(fs, *c.fence)
	}
	if f, ok := ctx.Value(callFence{}).(datastore.Fence); ok {
		fs = append(fs, f)
	}
	return fs
}

// WithReclaimable tells Check and GC which absent nodes may be treated as
// gone (their tunnel addresses are leaks). The daemon's GC passes nodes
// absent for the whole grace period; by default every absent node is.
func WithReclaimable(f func(node string) bool) Option { return func(c *Client) { c.reclaimable = f } }

// WithWatchedPools promises that the owner calls Invalidate whenever an
// IP pool, the IPAM configuration or a Node changes (routed's daemon
// does, from its node feed). The cached pool view and node labels are
// then trusted until the next Invalidate: a request no cached pool can
// serve (an IPv6 address on an IPv4-only cluster) fails with ErrNoPool
// at once instead of re-reading the pools first. Writes stay guarded by
// the pool's and the node's revisions either way.
func WithWatchedPools() Option { return func(c *Client) { c.watched = true } }

// Invalidate forgets the cached pool view and node labels: the next
// allocation reads them again.
func (c *Client) Invalidate() {
	c.epoch.Add(1)
	c.view.Store(nil)
}

// New returns a Client on ds.
func New(ds *datastore.Client, opts ...Option) *Client {
	c := &Client{
		ds:         ds,
		kv:         ds.Etcd().KV,
		emptyGrace: DefaultEmptyBlockGrace,
		budget:     DefaultRetryBudget,
		now:        time.Now,
		blocks:     newRevCache[*block](4096),
		handles:    newRevCache[*handleRec](4096),
		nodes:      map[string]*nodeState{},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Stats counts the etcd round trips and write conflicts of a Client.
type Stats struct {
	Gets      uint64 // range reads
	Txns      uint64 // transactions (reads batched in one txn count once)
	Conflicts uint64 // conditional writes that lost to another writer
}

type counters struct{ gets, txns, conflicts atomic.Uint64 }

// Stats returns the counters since the Client was created.
func (c *Client) Stats() Stats {
	return Stats{Gets: c.stats.gets.Load(), Txns: c.stats.txns.Load(), Conflicts: c.stats.conflicts.Load()}
}

// get is a bounded, counted range read.
func (c *Client) get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	// Read with the layout (readMany), in the same round trip.
	resp, err := c.readMany(ctx, clientv3.OpGet(key, opts...))
	if err != nil {
		return nil, err
	}
	return (*clientv3.GetResponse)(resp.Responses[0].GetResponseRange()), nil
}

// readMany runs several reads in one transaction so they see one
// revision, and costs one round trip.
func (c *Client) readMany(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	// The layout is read with the rest (no round trip of its own: a
	// CNI plugin's Client lives one call), every time: a datastore
	// restored from a backup older than the move has none.
	with := append(slices.Clip(ops), clientv3.OpGet(layoutKey))
	c.stats.txns.Add(1)
	tctx, cancel := c.ds.Ctx(ctx)
	defer cancel()
	resp, err := c.kv.Txn(tctx).Then(with...).Commit()
	if err != nil {
		return nil, c.ds.Wrap(err)
	}
	last := len(resp.Responses) - 1
	if kvs := resp.Responses[last].GetResponseRange().Kvs; len(kvs) > 0 && string(kvs[0].Value) == layoutCurrent {
		c.layoutOK.Store(true)
		resp.Responses = resp.Responses[:last]
		return resp, nil
	}
	// Not current: move the blocks first (an operation that writes),
	// then read again.
	c.layoutOK.Store(false)
	if err := c.ensureLayout(ctx); err != nil {
		return nil, err
	}
	if !c.layoutOK.Load() {
		// A read of a datastore with no block yet: what was read stands.
		resp.Responses = resp.Responses[:last]
		return resp, nil
	}
	return c.readMany(ctx, ops...)
}

// write is one key of a conditional multi-key write.
type write struct {
	key string
	// rev is the ModRevision the key must still have; 0 means it must not
	// exist.
	rev int64
	// val is the new value; nil deletes the key, unless guard is set.
	val []byte
	// guard only checks rev and leaves the key alone.
	guard bool
	// anyRev skips the comparison (an Extra's unconditional write).
	anyRev bool
}

// casResult is the outcome of cas.
type casResult struct {
	ok bool
	// rev is the revision of the commit: the new ModRevision of every key
	// written.
	rev int64
	// cur holds, after a failed cas, the current state of every key (nil
	// when absent), read in the same transaction.
	cur map[string]*mvccpb.KeyValue
}

// cas applies ws atomically if every key is still at its expected
// revision; otherwise it changes nothing and returns the current values,
// so the caller can retry without another read.
func (c *Client) cas(ctx context.Context, ws []write, extra ...clientv3.Cmp) (casResult, error) {
	if err := c.ensureLayout(ctx); err != nil {
		return casResult{}, err
	}
	cmps := make([]clientv3.Cmp, 0, len(ws)+len(extra))
	then := make([]clientv3.Op, 0, len(ws))
	els := make([]clientv3.Op, 0, len(ws))
	for _, w := range ws {
		if !w.anyRev {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(w.key), "=", w.rev))
		}
		els = append(els, clientv3.OpGet(w.key))
		switch {
		case w.guard:
		case w.val == nil:
			then = append(then, clientv3.OpDelete(w.key))
		default:
			then = append(then, clientv3.OpPut(w.key, string(w.val)))
		}
		if w.guard || !strings.HasPrefix(w.key, blockPrefix) {
			continue
		}
		// A block's summary changes with it (keys.go).
		skey := summaryKeyOf(w.key)
		if w.val == nil {
			then = append(then, clientv3.OpDelete(skey))
			continue
		}
		sum, err := summarize(w.val)
		if err != nil {
			return casResult{}, fmt.Errorf("ipam: summary of %s: %w", w.key, err)
		}
		then = append(then, clientv3.OpPut(skey, string(sum)))
		if w.rev == 0 {
			// A new block: nothing at its summary's key either (a
			// routed older than layout 2 stores whole blocks there).
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(skey), "=", 0))
		}
	}
	cmps = append(cmps, extra...)
	fenceAt := len(els)
	fences := c.fences(ctx)
	cmps, els = fenced(fences, cmps, els)
	c.stats.txns.Add(1)
	tctx, cancel := c.ds.Ctx(ctx)
	defer cancel()
	resp, err := c.kv.Txn(tctx).If(cmps...).Then(then...).Else(els...).Commit()
	if err != nil {
		return casResult{}, c.ds.Wrap(err)
	}
	if resp.Succeeded {
		return casResult{ok: true, rev: resp.Header.Revision}, nil
	}
	if err := checkFences(fences, resp.Responses[fenceAt:]); err != nil {
		return casResult{}, err
	}
	c.stats.conflicts.Add(1)
	res := casResult{rev: resp.Header.Revision, cur: make(map[string]*mvccpb.KeyValue, len(ws))}
	for i, w := range ws {
		res.cur[w.key] = nil
		if kvs := resp.Responses[i].GetResponseRange().GetKvs(); len(kvs) > 0 {
			res.cur[w.key] = kvs[0]
		}
	}
	return res, nil
}

// fenced adds fences' comparisons to cmps and their reads to els (after
// the caller's own reads: checkFences takes the responses from there).
func fenced(fences []datastore.Fence, cmps []clientv3.Cmp, els []clientv3.Op) ([]clientv3.Cmp, []clientv3.Op) {
	for _, f := range fences {
		cmps = append(cmps, f.Cmps()...)
		els = append(els, f.Gets()...)
	}
	return cmps, els
}

// checkFences says which fence failed a transaction, from the Else
// responses of fenced's reads (rs starts at the first of them).
func checkFences(fences []datastore.Fence, rs []*etcdserverpb.ResponseOp) error {
	for _, f := range fences {
		n := len(f.Gets())
		if err := f.Check(rs[:n]); err != nil {
			return err
		}
		rs = rs[n:]
	}
	return nil
}

// modRev is the ModRevision of kv, 0 for an absent key.
func modRev(kv *mvccpb.KeyValue) int64 {
	if kv == nil {
		return 0
	}
	return kv.ModRevision
}

// backoff waits before retry number attempt (1-based) of a conflicting
// write. The first two retries are immediate: the failed write returned
// the current state, and writing again at once usually wins. Later ones
// sleep a jittered, growing delay so that writers that collided do not
// collide again in lock step. It reports whether it slept: the state the
// failed write returned is then likely stale, and the caller should read
// it again just before retrying rather than lose once more. This is not
// internal/backoff's pacing of a loop waiting for something to recover:
// immediate retries and jitter are what spread colliding writers apart.
func backoff(ctx context.Context, attempt int) (bool, error) {
	if attempt <= 2 {
		return false, ctx.Err()
	}
	ceiling := time.Millisecond << min(attempt, 6)
	d := time.Duration(rand.Int64N(int64(ceiling))) + time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false, ctx.Err()
	case <-t.C:
		return true, nil
	}
}

// retries tracks the lost writes of one operation. Every operation keeps
// retrying while its time budget lasts (none for releases) and its
// context is live; each lost write returned the current state, so every
// retry is an informed one.
type retries struct {
	c     *Client
	what  string
	start time.Time
	// budget is how long the operation may keep losing; 0 means until
	// its context ends.
	budget time.Duration
	n      int
}

// retries starts the retry budget of an assignment described by what.
func (c *Client) retries(what string) *retries {
	return &retries{c: c, what: what, start: time.Now(), budget: c.budget}
}

// releaseRetries starts an unbounded retry loop for a release: a release
// that gave up would leave its address allocated, so only its context
// (the caller's deadline) ends it.
func (c *Client) releaseRetries(what string) *retries {
	return &retries{c: c, what: what, start: time.Now()}
}

// lost records a lost write and waits before the next try. It fails with
// ErrContention once the budget is spent, and reports whether it slept:
// the state the failed write returned is then likely stale too.
func (r *retries) lost(ctx context.Context) (bool, error) {
	r.n++
	if err := r.spent(); err != nil {
		return false, err
	}
	slept, err := backoff(ctx, r.n)
	if err != nil {
		return false, r.c.ds.Wrap(err)
	}
	return slept, nil
}

// spent returns ErrContention once the budget is used up.
func (r *retries) spent() error {
	if r.budget <= 0 {
		return nil
	}
	elapsed := time.Since(r.start)
	if elapsed < r.budget {
		return nil
	}
	log.WithFields(logrus.Fields{"op": r.what, "conflicts": r.n, "elapsed": elapsed.Round(time.Millisecond)}).Warn("giving up after repeated write conflicts")
	return fmt.Errorf("%w: %s: %d conflicting writes in %s (retry budget %s)", ErrContention, r.what, r.n, elapsed.Round(time.Millisecond), r.budget)
}

// nodeState is what a Client remembers about one node. Fields other than
// sem are only touched while holding sem.
type nodeState struct {
	sem chan struct{}
	// ni is the node's labels and record revision, valid when niKnown
	// and epoch is the Client's (no Invalidate since they were read).
	ni      nodeInfo
	niKnown bool
	epoch   uint64
	// own lists the keys of blocks the node holds a confirmed affinity
	// for, in pool order; nil until loaded.
	own []string
	// borrow lists other nodes' blocks with free addresses found by the
	// last borrowing scan, so that a node that keeps borrowing does not
	// scan every block each time.
	borrow []string
}

// lockNode serialises this Client's allocations for node: goroutines of
// one process would otherwise only collide on the same block and waste
// round trips. Writers in other processes are still handled by the
// conditional writes.
func (c *Client) lockNode(ctx context.Context, node string) (*nodeState, func(), error) {
	c.mu.Lock()
	ns := c.nodes[node]
	if ns == nil {
		ns = &nodeState{sem: make(chan struct{}, 1)}
		c.nodes[node] = ns
	}
	c.mu.Unlock()
	select {
	case ns.sem <- struct{}{}:
		return ns, func() { <-ns.sem }, nil
	case <-ctx.Done():
		return nil, nil, c.ds.Wrap(ctx.Err())
	}
}
