// Package feed is a routed node's one view of the datastore: one list and
// one watch over routed's whole key space (datastore.Stream), turned into
// one ordered stream of typed updates (resources, block affinities, the
// addresses blocks lend to other nodes) that components subscribe to by
// kind.
//
// Invariants:
//   - Every consumer sees updates in etcd's revision order, across kinds.
//   - Nothing is delivered while the Gate holds the datastore (wiped,
//     swapped, rolled back, not ready); when it lets go, every consumer
//     gets a fresh snapshot.
//   - The feed never waits for a consumer. Each has its own queue; one
//     that falls more than MaxPending updates behind has its backlog
//     merged by key (the latest change of each object, in revision
//     order), and so does a snapshot it has not taken yet: the queue
//     never holds more than one entry per object, and nothing is rebuilt
//     on the feed's goroutine. The same rule holds for every consumer, so
//     a slow BGP push cannot stall felix.
//   - The feed keeps no copy of the datastore: a snapshot is made from a
//     list (at start, and when the gate lets go after a hold, when the
//     feed asks the stream to list again), taken page by page as it is
//     read, keeping of each key its value, packed with its neighbours'
//     (pack.go), until each consumer decoded it; a consumer's queue lets
//     go of what it delivered. Keys no
//     consumer subscribes to (IPAM handles) are not listed at all.
//   - A list's snapshot waits, queued, until the watch has brought the
//     feed to the revision etcd had when the list was read whole (at most
//     maxCatchUp): what was written while a big cluster was listed under
//     churn folds into it instead of following it as a backlog.
//   - With Options.Cache, a copy of the list is kept on disk (written as
//     the list is read; changes since its last write in memory, bounded):
//     a restart starts from it instead of a list, read key by key, and
//     the first snapshot still comes only once the watch brought it up to
//     etcd's revision at start.
//   - No consumer reads etcd: what they need comes in the feed.
package feed

import (
	"context"
	"iter"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/datastore/listcache"
	"github.com/routed-net/routed/pkg/ipam"
)

// Kinds the feed carries besides the resource kinds of pkg/api.
const (
	// KindAffinity updates carry an ipam.Affinity (every node's).
	KindAffinity api.Kind = "BlockAffinity"
	// KindBorrowed updates carry one block's addresses held by nodes
	// other than the block's own; only changes of that set are sent.
	KindBorrowed api.Kind = "BorrowedAddresses"
)

// MaxPending is how many undelivered updates a consumer may have before
// its backlog is merged by key.
const MaxPending = 4096

// Update is one change, or in a snapshot one current object.
type Update struct {
	Kind     api.Kind
	Name     string // resource name; affinity "<node>/<cidr>"; block CIDR
	Deleted  bool
	Revision int64
	Resource api.Resource // resource kinds; nil when Deleted or Unreadable
	// Unreadable is why a stored record of a kind the subscription
	// asked to hear of (ReportUnreadable) did not decode: the record
	// exists, its content is unknown (Resource is nil). Its previous
	// version, if any, is no longer the record's.
	Unreadable error
	// Value is an unreadable record's stored bytes (nil otherwise), for
	// a consumer that can salvage what it must know of it (felix: the
	// node and interface of a HostEndpoint).
	Value    []byte
	Affinity ipam.Affinity         // KindAffinity
	Block    netip.Prefix          // KindBorrowed
	Borrowed map[netip.Addr]string // KindBorrowed; empty: none
}

// Batch is what a consumer receives at once.
type Batch struct {
	// Snapshot batches hold the whole current state of the consumer's
	// kinds and replace everything before them; after the first the
	// consumer is in sync.
	Snapshot bool
	Revision int64
	Updates  []Update
	// Encoded are a snapshot's objects of the kinds the subscription
	// takes undecoded (Undecoded), in key order.
	Encoded []Encoded
}

// Consumer takes the feed's batches. OnBatch runs on the consumer's own
// delivery goroutine, one batch at a time, in order; it may block (only
// its own queue waits).
type Consumer interface {
	OnBatch(Batch)
}

// ContextConsumer is a Consumer whose call may wait for something
// outside the feed (felix hands each batch to its loop, which may have
// stopped). The feed calls OnBatchContext instead of OnBatch, with a
// context that ends when Run is stopping; the call returns then,
// dropping the batch. That loses no state: nothing is delivered after
// Run returns, and a feed that runs again starts every consumer from a
// snapshot (a list, or the cache brought up to date).
type ContextConsumer interface {
	Consumer
	OnBatchContext(ctx context.Context, b Batch)
}

// Gate judges the datastore before the consumers follow it.
type Gate interface {
	// Admit reports whether consumers may follow the datastore whose
	// identity is ci (nil: it has none) at revision rev.
	Admit(ci *datastore.ClusterInfo, rev int64) bool
	// Seen records a revision delivered to the consumers.
	Seen(rev int64)
}

// Options tune a Feed; the zero value is usable.
type Options struct {
	Gate Gate            // nil: every datastore is followed
	Beat *heartbeat.Beat // marked as the watch makes progress
	// Cache, when set, is the node-local copy of what the feed lists:
	// a restart starts from it (brought up to etcd's revision at start
	// before anything is delivered) instead of listing everything.
	Cache *listcache.Cache
}

// Feed is one node's datastore feed. Subscribe every consumer, then Run.
type Feed struct {
	ds    *datastore.Client
	opt   Options
	subs  []*sub
	kinds map[api.Kind]bool
	log   *logrus.Entry

	synced  atomic.Bool
	held    atomic.Bool
	seen    atomic.Int64 // the revision the feed has read up to
	metrics metrics

	nudge chan struct{} // Rejudge -> the stream's goroutine

	// tallies is every block's tally (ipam.BlockTally), written by Run's
	// goroutine and read by BlockTallies.
	tallies tallies

	// Owned by Run's goroutine (the Stream's handler calls).
	borrowed map[netip.Prefix]map[netip.Addr]string
	ci       *datastore.ClusterInfo
	rev      int64
	wantList bool // the gate let go: list again for a snapshot
	// listHead is etcd's revision when the list being read was read
	// whole (datastore.HeadTaker); catchUp, when not zero, the revision
	// the consumers' snapshot waits for, since catchUpFrom.
	listHead    int64
	catchUp     int64
	catchUpFrom time.Time

	// hold is the consumers' snapshot held for the catch-up: shared
	// with its timer (maxCatchUp), which lets go even when the stream
	// delivers nothing more (etcd lost right after the list).
	hold struct {
		sync.Mutex
		gen   uint64 // one per list's snapshot
		on    bool
		timer *time.Timer
	}
}

var _ datastore.HeadTaker = (*Feed)(nil)

// maxCatchUp bounds how long a list's snapshot waits for the watch to
// bring it to the revision etcd had when the list was read (a watch
// that broke lists again, with its own wait).
var maxCatchUp = 10 * time.Second

// New returns a Feed reading ds.
func New(ds *datastore.Client, opt Options) *Feed {
	return &Feed{ds: ds, opt: opt, kinds: map[api.Kind]bool{}, metrics: newMetrics(),
		nudge: make(chan struct{}, 1), log: logrus.WithField("component", "feed")}
}

// SubOption narrows a subscription.
type SubOption func(*sub)

// OnlyNames keeps, of kind k, the objects whose name keep accepts; the
// others are dropped by name before decoding (a node's own endpoints out
// of every endpoint in the cluster).
func OnlyNames(k api.Kind, keep func(name string) bool) SubOption {
	return func(s *sub) { s.keep[k] = keep }
}

// ReportUnreadable hands the consumer, for kinds, the records that do
// not decode, as updates with Unreadable set (in snapshots too; see
// Batch.Unreadable), instead of skipping them: a consumer for which a
// missing record is not the same as an unknown one (a network policy:
// skipped, it is fail-open) decides what an unknown one means.
// A kind also taken undecoded (Undecoded) has its snapshots'
// unreadable objects among Batch.Encoded, not Batch.Unreadable:
// DecodeEachReporting finds them (Dispatch does when its handler does
// not take them undecoded).
func ReportUnreadable(kinds ...api.Kind) SubOption {
	for _, k := range kinds {
		if k == KindAffinity || k == KindBorrowed {
			panic("feed.ReportUnreadable: " + string(k) + " is not a resource kind")
		}
	}
	return func(s *sub) {
		for _, k := range kinds {
			s.unreadable[k] = true
		}
	}
}

// Subscribe registers c for kinds (resource kinds, KindAffinity,
// KindBorrowed) under name (logs and metrics). Call before Run.
func (f *Feed) Subscribe(name string, kinds []api.Kind, c Consumer, opts ...SubOption) {
	s := newSub(name, kinds, c)
	for _, o := range opts {
		o(s)
	}
	for k := range s.kinds {
		f.kinds[k] = true
	}
	f.subs = append(f.subs, s)
}

// Synced reports whether the consumers have been handed a snapshot.
func (f *Feed) Synced() bool { return f.synced.Load() }

// Revision is the datastore revision the feed has read up to (delivered,
// or held).
func (f *Feed) Revision() int64 { return f.seen.Load() }

// Held reports whether the gate holds the consumers.
func (f *Feed) Held() bool { return f.held.Load() }

// Stalled names a consumer whose OnBatch call has run longer than max,
// and for how long ("" when none): a wedged consumer no longer holds
// up the feed, so liveness asks here.
func (f *Feed) Stalled(now time.Time, max time.Duration) (string, time.Duration) {
	for _, s := range f.subs {
		if t := s.busySince.Load(); t != 0 {
			if d := now.Sub(time.Unix(0, t)); d > max {
				return s.name, d
			}
		}
	}
	return "", 0
}

// Rejudge asks the feed to put the datastore before the gate again soon,
// on the feed's own goroutine, without waiting for a change: a gate whose
// answer changed by itself (the work it waited for is done) calls it.
// Safe from any goroutine; it never blocks.
func (f *Feed) Rejudge() {
	select {
	case f.nudge <- struct{}{}:
	default:
	}
}

// WantList implements datastore.Relister: the gate let go after a hold,
// and the consumers' snapshot comes from a fresh list.
func (f *Feed) WantList() bool { return f.wantList }

// Collectors are the feed's Prometheus metrics.
func (f *Feed) Collectors() []prometheus.Collector {
	if f.opt.Cache != nil {
		return append(f.metrics.all(), f.opt.Cache.Collectors()...)
	}
	return f.metrics.all()
}

// Run follows the datastore until ctx ends; it returns nil then, once
// every consumer's delivery goroutine has returned (a consumer is never
// called after Run returns).
func (f *Feed) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // runs first: the delivery goroutines end, then Wait
	defer func() {
		f.hold.Lock()
		if f.hold.timer != nil {
			f.hold.timer.Stop()
		}
		f.hold.on = false // nothing more is handed over
		f.hold.Unlock()
	}()
	for _, s := range f.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.deliver(ctx)
		}()
	}
	so := datastore.StreamOptions{
		Beat:         f.opt.Beat,
		ProbeKey:     datastore.ClusterInfoKey,
		OnResume:     func() { f.metrics.resumes.Inc() },
		ListPrefixes: listPrefixes(f.kinds),
		Nudge:        f.nudge,
	}
	if f.opt.Cache != nil {
		so.Cache = f.opt.Cache
		// Written once more when ctx ends, after the stream stopped.
		wg.Go(func() { _ = f.opt.Cache.Run(ctx) })
	}
	err := f.ds.Stream(ctx, datastore.KeyPrefix, f, so)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// OnList implements datastore.StreamHandler (a list handed whole).
func (f *Feed) OnList(kvs []*mvccpb.KeyValue, rev int64, reason datastore.ListReason) {
	f.OnListStream(func(yield func(*mvccpb.KeyValue, error) bool) {
		for _, kv := range kvs {
			if !yield(kv, nil) {
				return
			}
		}
	}, rev, reason)
}

// OnListStream implements datastore.ListStreamer: it keeps of each key
// only what a subscriber takes (an item: the key and the value, packed
// with its neighbours': pack.go), so the list's pages are garbage as
// soon as they are read, and hands the
// consumers the snapshot once the list was read whole. A list cut short
// changes nothing (the stream lists again).
func (f *Feed) OnListStream(kvs iter.Seq2[*mvccpb.KeyValue, error], rev int64, reason datastore.ListReason) {
	f.listHead = 0
	oldBorrowed, oldCI := f.borrowed, f.ci
	f.borrowed, f.ci = map[netip.Prefix]map[netip.Addr]string{}, nil
	f.tallies.listing()
	// Each consumer's snapshot is made as the list is read: no array of
	// every object is made to be split after (a big cluster's 170,000
	// items, about 18 MB, at the start-up's peak).
	mine := make([][]item, len(f.subs))
	pk := packer{out: func(its []item) {
		for i, s := range f.subs {
			for _, it := range its {
				if s.wants(it) {
					mine[i] = append(mine[i], it)
				}
			}
		}
	}}
	for kv, err := range kvs {
		if err != nil {
			f.log.WithError(err).WithField("reason", reason).Warn("the list was cut short; nothing of it is delivered")
			f.borrowed, f.ci = oldBorrowed, oldCI
			f.tallies.listed(false)
			return
		}
		if it, ok := f.take(kv, false); ok {
			pk.add(it)
		}
	}
	pk.flush()
	f.metrics.lists.WithLabelValues(string(reason)).Inc()
	f.rev, f.wantList = rev, false
	f.seen.Store(rev)
	// The gate first: the new tallies are served only once it has
	// judged the datastore they came from (BlockTallies asks held).
	trusted := f.admit()
	f.tallies.listed(true)
	if !trusted {
		return
	}
	f.held.Store(false)
	// What was written while the list was read comes next: the
	// snapshot, queued, absorbs it before anyone takes it (one
	// programming of each object instead of the list's, then a backlog
	// of everything written during it).
	hold := f.listHead > rev
	f.hold.Lock()
	f.hold.gen++
	gen := f.hold.gen
	f.hold.on = hold
	if f.hold.timer != nil {
		f.hold.timer.Stop()
		f.hold.timer = nil
	}
	for i, s := range f.subs {
		s.pushSnapshot(f, rev, mine[i], hold)
		mine[i] = nil
	}
	if hold {
		head, wait := f.listHead, maxCatchUp
		f.hold.timer = time.AfterFunc(wait, func() {
			if f.letGo(gen) {
				f.log.WithFields(logrus.Fields{"listRevision": rev, "listHead": head, "waited": wait}).
					Warn("the watch has not reached the revision etcd had when the list was read; handing the consumers their snapshot as it is")
			}
		})
	}
	f.hold.Unlock()
	f.catchUp = 0
	if hold {
		f.catchUp, f.catchUpFrom = f.listHead, time.Now()
	} else {
		f.synced.Store(true)
	}
	if f.opt.Gate != nil {
		f.opt.Gate.Seen(rev)
	}
}

// OnListHead implements datastore.HeadTaker.
func (f *Feed) OnListHead(head int64) { f.listHead = head }

// caughtUp hands the consumers their snapshot once the watch reached
// the revision etcd had when the list was read (maxCatchUp's timer lets
// go otherwise).
func (f *Feed) caughtUp(rev int64) {
	if f.catchUp == 0 || rev < f.catchUp {
		return
	}
	f.hold.Lock()
	gen := f.hold.gen
	f.hold.Unlock()
	if f.letGo(gen) {
		f.log.WithFields(logrus.Fields{"revision": rev, "listHead": f.catchUp, "took": time.Since(f.catchUpFrom).Round(time.Millisecond)}).
			Info("caught up with what was written during the list; handing the consumers their snapshot")
	}
	f.catchUp = 0
}

// letGo releases the snapshot of list gen if it is still held, and the
// gate has not held the consumers since (a relist replaces it then).
func (f *Feed) letGo(gen uint64) bool {
	f.hold.Lock()
	defer f.hold.Unlock()
	if gen != f.hold.gen || !f.hold.on || f.held.Load() {
		return false
	}
	f.hold.on = false
	if f.hold.timer != nil {
		f.hold.timer.Stop()
		f.hold.timer = nil
	}
	for _, s := range f.subs {
		s.release()
	}
	f.synced.Store(true)
	return true
}

// OnEvents implements datastore.StreamHandler.
func (f *Feed) OnEvents(evs []*clientv3.Event, rev int64) {
	f.rev = rev
	defer f.seen.Store(rev)
	var out []item
	identity := false
	for _, ev := range evs {
		deleted := ev.Type == clientv3.EventTypeDelete
		if string(ev.Kv.Key) == datastore.ClusterInfoKey {
			identity = true
		}
		if it, ok := f.take(ev.Kv, deleted); ok {
			out = append(out, it)
		}
	}
	if identity || f.held.Load() {
		if !f.admit() {
			return
		}
		if f.held.Load() {
			// Let go with a snapshot of the datastore as it is now:
			// the stream lists again before anything else.
			f.wantList = true
			return
		}
	}
	if len(out) > 0 {
		for _, s := range f.subs {
			s.push(f, rev, out)
		}
	}
	f.caughtUp(rev)
	if f.opt.Gate != nil {
		f.opt.Gate.Seen(rev)
	}
}

// admit asks the gate about the datastore as the feed sees it now, and
// holds the consumers when it says no.
func (f *Feed) admit() bool {
	if f.opt.Gate == nil || f.opt.Gate.Admit(f.ci, f.rev) {
		return true
	}
	if !f.held.Swap(true) {
		f.log.WithField("revision", f.rev).Warn("holding every consumer: the datastore is not trusted (see the identity guard's log)")
	}
	return false
}

// take records what the feed keeps of one key's new value (or deletion):
// the identity and borrowed addresses; and returns the update it makes,
// if any subscriber wants it.
func (f *Feed) take(kv *mvccpb.KeyValue, deleted bool) (item, bool) {
	key := string(kv.Key)
	switch {
	case key == datastore.ClusterInfoKey:
		f.ci = nil
		if !deleted {
			ci, err := datastore.DecodeClusterInfo(kv.Value)
			if err != nil {
				f.log.WithError(err).Warn("unreadable cluster identity")
				ci = &datastore.ClusterInfo{} // present but unreadable: no GUID matches
			}
			f.ci = ci
		}
		return item{}, false
	case ipam.IsBlockKey(key):
		if !f.kinds[KindBorrowed] {
			return item{}, false
		}
		return f.takeBlock(kv, deleted)
	case ipam.IsAffinityKey(key):
		if !f.kinds[KindAffinity] {
			return item{}, false
		}
		return item{kind: KindAffinity, key: key, value: value(kv, deleted), rev: kv.ModRevision, deleted: deleted}, true
	}
	k, name, ok := datastore.ParseKey(key)
	if !ok || !f.kinds[k] {
		return item{}, false
	}
	return item{kind: k, key: key, name: name, value: value(kv, deleted), rev: kv.ModRevision, deleted: deleted}, true
}

// value is what an item keeps of kv's value: nothing for a deletion.
func value(kv *mvccpb.KeyValue, deleted bool) []byte {
	if deleted {
		return nil
	}
	return kv.Value
}

// takeBlock keeps each block's borrowed addresses and reports a block
// only when they changed (most block writes change none).
func (f *Feed) takeBlock(kv *mvccpb.KeyValue, deleted bool) (item, bool) {
	p, br, t, err := ipam.DecodeBlock(string(kv.Key), kv.Value, deleted)
	if err != nil {
		f.log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable block")
		if p.IsValid() {
			// Not counted, as a read of every block does not count it
			// (its borrowed addresses stay as they were: routes do not
			// go on a record that cannot be read).
			f.tallies.set(p, ipam.BlockTally{}, true)
		}
		return item{}, false
	}
	f.tallies.set(p, t, deleted)
	if sameBorrowed(f.borrowed[p], br) {
		return item{}, false
	}
	if len(br) == 0 {
		delete(f.borrowed, p)
	} else {
		f.borrowed[p] = br
	}
	return item{kind: KindBorrowed, key: "borrowed:" + p.String(), rev: kv.ModRevision, br: &borrowedItem{block: p, addrs: br}}, true
}

func sameBorrowed(a, b map[netip.Addr]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// listPrefixes are the parts of the key space a list reads for kinds:
// the cluster identity and the subscribed kinds' ranges, not the IPAM
// handles (one per pod) that no consumer reads.
func listPrefixes(kinds map[api.Kind]bool) []string {
	out := []string{datastore.ClusterInfoKey}
	for k := range kinds {
		switch k {
		case KindAffinity:
			out = append(out, ipam.AffinityKeyPrefix)
		case KindBorrowed:
			out = append(out, ipam.BlockKeyPrefix)
		default:
			out = append(out, datastore.KindPrefix(k))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
