package feed

import (
	"cmp"
	"context"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// item is an update before decoding: the feed's goroutine only moves raw
// values, each consumer's goroutine decodes its own copy (consumers may
// change what they are given). An item keeps the stored value and the
// key as one string (name is a part of it), not etcd's KeyValue: a big
// cluster's snapshot holds one item per object until its consumer
// decodes it.
type item struct {
	kind    api.Kind
	key     string // the object's key (a block's: "borrowed:<cidr>")
	name    string // resource name: a part of key
	value   []byte // the stored value (resource and affinity kinds); nil when deleted
	rev     int64  // the key's ModRevision (the block's for KindBorrowed)
	deleted bool
	pi      uint16        // value's place in pk
	pk      *pack         // a listed value's pack (value is nil then)
	br      *borrowedItem // KindBorrowed
}

// borrowedItem is one block's addresses held by other nodes.
type borrowedItem struct {
	block netip.Prefix
	addrs map[netip.Addr]string
}

// pendingBatch is one entry of a consumer's queue. A change batch is a
// list of items in revision order, or (merged) the latest item of each
// object, keyed by object, deletions kept. A snapshot is its present
// objects sorted by key, plus (merged) the changes it absorbed while
// queued, by object: no map of the whole state is built.
type pendingBatch struct {
	snapshot bool
	rev      int64
	items    []item
	merged   map[string]item
	present  int // a snapshot's objects, the absorbed changes applied
}

func (b *pendingBatch) size() int {
	if b.snapshot {
		return b.present
	}
	if b.merged != nil {
		return len(b.merged)
	}
	return len(b.items)
}

// mergeable reports whether later changes fold into b (a snapshot or a
// merged change batch) instead of queueing behind it.
func (b *pendingBatch) mergeable() bool { return b.snapshot || b.merged != nil }

// merge folds items (later than everything in b) into b's map.
func (b *pendingBatch) merge(items []item) {
	if b.merged == nil {
		b.merged = make(map[string]item, len(items))
	}
	for _, it := range items {
		if b.snapshot {
			if b.holds(it.key) {
				b.present--
			}
			if !it.isDeletion() {
				b.present++
			}
		}
		b.merged[it.key] = it
	}
}

// holds reports whether snapshot b holds an object at key now.
func (b *pendingBatch) holds(key string) bool {
	if it, ok := b.merged[key]; ok {
		return !it.isDeletion()
	}
	_, found := slices.BinarySearchFunc(b.items, key, func(it item, k string) int { return strings.Compare(it.key, k) })
	return found
}

// flatten returns b's items: a merged change batch's in revision order;
// a snapshot's present objects by key, the absorbed changes applied.
func (b *pendingBatch) flatten() []item {
	if len(b.merged) == 0 {
		return b.items
	}
	changes := make([]item, 0, len(b.merged))
	for _, it := range b.merged {
		changes = append(changes, it)
	}
	if !b.snapshot {
		slices.SortFunc(changes, func(x, y item) int {
			if c := cmp.Compare(x.rev, y.rev); c != 0 {
				return c
			}
			return strings.Compare(x.key, y.key)
		})
		return changes
	}
	slices.SortFunc(changes, func(x, y item) int { return strings.Compare(x.key, y.key) })
	out := make([]item, 0, len(b.items)+len(changes))
	i := 0
	for _, ch := range changes {
		for i < len(b.items) && b.items[i].key < ch.key {
			out = append(out, b.items[i])
			i++
		}
		if i < len(b.items) && b.items[i].key == ch.key {
			i++ // replaced or deleted
		}
		if !ch.isDeletion() {
			out = append(out, ch)
		}
	}
	return append(out, b.items[i:]...)
}

func (it item) isDeletion() bool {
	if it.kind == KindBorrowed {
		return it.br == nil || len(it.br.addrs) == 0
	}
	return it.deleted
}

func byKey(x, y item) int { return strings.Compare(x.key, y.key) }

// sub is one consumer: its kinds, its queue and its delivery goroutine.
type sub struct {
	name  string
	kinds map[api.Kind]bool
	keep  map[api.Kind]func(name string) bool // OnlyNames
	// undecoded are the kinds whose snapshot objects go undecoded
	// (Undecoded).
	undecoded map[api.Kind]bool
	// unreadable are the kinds whose records that do not decode are
	// reported (ReportUnreadable), not skipped.
	unreadable map[api.Kind]bool
	c          Consumer
	wake       chan struct{}

	mu      sync.Mutex
	queue   []pendingBatch
	pending int // items in queue
	// holding keeps a queued snapshot from the consumer until the feed
	// caught up with the writes made while it was listed (release).
	holding bool

	busySince atomic.Int64 // unix nanoseconds of the OnBatch call in progress; 0: none
}

func newSub(name string, kinds []api.Kind, c Consumer) *sub {
	s := &sub{name: name, kinds: map[api.Kind]bool{}, keep: map[api.Kind]func(string) bool{}, undecoded: map[api.Kind]bool{}, unreadable: map[api.Kind]bool{}, c: c, wake: make(chan struct{}, 1)}
	for _, k := range kinds {
		s.kinds[k] = true
	}
	return s
}

// mine returns the items of s's kinds that it keeps, in their order, in
// a slice of its own (its delivery clears it as it decodes).
func (s *sub) mine(items []item) []item {
	n := 0
	for _, it := range items {
		if s.wants(it) {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]item, 0, n)
	for _, it := range items {
		if s.wants(it) {
			out = append(out, it)
		}
	}
	return out
}

func (s *sub) wants(it item) bool {
	if !s.kinds[it.kind] {
		return false
	}
	keep := s.keep[it.kind]
	return keep == nil || keep(it.name)
}

// pushSnapshot replaces the consumer's queue with the state at rev (on
// the feed's goroutine): everything queued before it is superseded. It
// stays mergeable until the consumer takes it, so changes that arrive
// meanwhile fold into it instead of queueing behind it. mine are the
// present objects the consumer keeps (mine), one per key, in a slice of
// its own.
func (s *sub) pushSnapshot(f *Feed, rev int64, mine []item, hold bool) {
	f.metrics.snapshots.WithLabelValues(s.name).Inc()
	b := pendingBatch{snapshot: true, rev: rev, items: mine}
	if !slices.IsSortedFunc(b.items, byKey) {
		slices.SortFunc(b.items, byKey)
	}
	b.present = len(b.items)
	s.mu.Lock()
	s.queue = []pendingBatch{b}
	s.pending = b.size()
	s.holding = hold
	s.mu.Unlock()
	if !hold {
		s.signal()
	}
}

// release lets the consumer take a snapshot held by pushSnapshot.
func (s *sub) release() {
	s.mu.Lock()
	s.holding = false
	s.mu.Unlock()
	s.signal()
}

// push queues changes for the consumer (on the feed's goroutine): the
// items of its kinds. They fold into a merged batch at the queue's end;
// a queue that would pass MaxPending is merged into one batch first.
func (s *sub) push(f *Feed, rev int64, items []item) {
	mine := s.mine(items)
	if len(mine) == 0 {
		return
	}
	s.mu.Lock()
	n := len(s.queue)
	switch {
	case n > 0 && s.queue[n-1].mergeable():
		last := &s.queue[n-1]
		s.pending -= last.size()
		last.merge(mine)
		last.rev = rev
		s.pending += last.size()
	case s.pending+len(mine) > MaxPending:
		f.metrics.overflows.WithLabelValues(s.name).Inc()
		f.log.WithFields(logrus.Fields{"consumer": s.name, "pending": s.pending + len(mine), "busyFor": s.busyFor()}).
			Warn("consumer fell behind; its backlog is merged to the latest change of each object")
		b := pendingBatch{rev: rev}
		for _, q := range s.queue {
			b.merge(q.items)
		}
		b.merge(mine)
		s.queue = []pendingBatch{b}
		s.pending = b.size()
	default:
		s.queue = append(s.queue, pendingBatch{rev: rev, items: mine})
		s.pending += len(mine)
	}
	s.mu.Unlock()
	s.signal()
}

func (s *sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// deliver hands queued batches to the consumer until ctx ends.
func (s *sub) deliver(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		for {
			s.mu.Lock()
			if len(s.queue) == 0 || s.holding {
				s.mu.Unlock()
				break
			}
			snapshot, rev, items := s.takeLocked()
			s.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			s.busySince.Store(time.Now().UnixNano())
			b := decodeBatch(snapshot, rev, items, s.undecoded, s.unreadable)
			if cc, ok := s.c.(ContextConsumer); ok {
				cc.OnBatchContext(ctx, b)
			} else {
				s.c.OnBatch(b)
			}
			s.busySince.Store(0)
		}
	}
}

// parallelDecode is the batch size from which decoding is spread over
// every CPU: a big cluster's first snapshot (150,000 endpoints, about
// 25 µs each) would otherwise hold its consumer for seconds on one.
const parallelDecode = 2048

// takeLocked removes what the consumer gets next: a snapshot alone, or
// every change queued, in revision order, as one batch (a consumer that
// programs once per batch programs once for its whole backlog).
func (s *sub) takeLocked() (snapshot bool, rev int64, items []item) {
	b := s.queue[0]
	if b.snapshot {
		s.dropLocked(1)
		return true, b.rev, b.flatten()
	}
	n := 0
	for n < len(s.queue) && !s.queue[n].snapshot {
		n++
	}
	if n == 1 {
		items = b.flatten()
	} else {
		for _, q := range s.queue[:n] {
			items = append(items, q.flatten()...)
		}
	}
	rev = s.queue[n-1].rev
	s.dropLocked(n)
	return false, rev, items
}

// dropLocked removes the first n batches of the queue, leaving nothing
// of them reachable from it (a taken snapshot, the whole state of the
// consumer's kinds, must not stay behind in the queue's array until the
// next push).
func (s *sub) dropLocked(n int) {
	clear(s.queue[:n])
	s.queue = s.queue[n:]
	if len(s.queue) == 0 {
		s.queue = nil
	}
	s.pending = 0
	for _, q := range s.queue {
		s.pending += q.size()
	}
}

// decodeBatch decodes items (a snapshot's objects of the undecoded kinds
// go on in Encoded). An item that does not decode is skipped, or, of a
// kind in report, kept as an update with Unreadable set.
func decodeBatch(snapshot bool, rev int64, items []item, undecoded, report map[api.Kind]bool) Batch {
	out := Batch{Snapshot: snapshot, Revision: rev}
	if snapshot {
		items, out.Encoded = takeUndecoded(items, undecoded, report)
	}
	ups := make([]Update, len(items))
	ok := make([]bool, len(items))
	// Each item is cleared once decoded: its raw value is garbage
	// while the rest decode, not held beside the decoded batch.
	decodeRange := func(_, lo, hi int) {
		d := newDecoding()
		for i := lo; i < hi; i++ {
			ups[i], ok[i] = decodeItem(items[i], d)
			if ok[i] && report[ups[i].Kind] && ups[i].Resource != nil {
				// For a reported kind, a record whose content names
				// another object (or none: "null", "{}") is as
				// unreadable as one that does not decode.
				if err := datastore.CheckName(ups[i].Kind, ups[i].Name, ups[i].Resource, ups[i].Revision); err != nil {
					log.WithError(err).WithField("key", items[i].key).Warn("unreadable record")
					ups[i].Resource, ups[i].Unreadable, ups[i].Value, ok[i] = nil, err, d.kept(items[i]), false
				}
			}
			items[i] = item{}
		}
	}
	if len(items) >= parallelDecode {
		spread(len(items), decodeRange)
	} else {
		decodeRange(0, 0, len(items))
	}
	n := 0
	for i := range ups {
		if ok[i] || (ups[i].Unreadable != nil && report[ups[i].Kind]) {
			ups[n] = ups[i]
			n++
		}
	}
	clear(ups[n:])
	out.Updates = ups[:n]
	return out
}

// spread calls f on n items split in one range per CPU (w numbers the
// range, from 0 to GOMAXPROCS-1), at once, and
// returns when every call has.
func spread(n int, f func(w, lo, hi int)) {
	workers := runtime.GOMAXPROCS(0)
	if workers < 2 || n < 2 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for w, lo := 0, 0; lo < n; w, lo = w+1, lo+per {
		wg.Go(func() { f(w, lo, min(lo+per, n)) })
	}
	wg.Wait()
}

// decodeItem decodes one item; false: skip it (a resource whose value
// does not decode, with Unreadable set, or an unreadable affinity).
func decodeItem(it item, d *decoding) (Update, bool) {
	u := Update{Kind: it.kind, Name: it.name, Deleted: it.deleted, Revision: it.rev}
	switch it.kind {
	case KindBorrowed:
		u.Name, u.Block, u.Borrowed = it.br.block.String(), it.br.block, maps.Clone(it.br.addrs)
		if u.Borrowed == nil {
			u.Borrowed = map[netip.Addr]string{}
		}
		return u, true
	}
	value, err := d.up.value(it)
	if err != nil {
		log.WithError(err).WithField("key", it.key).Warn("unreadable record")
		if it.kind != KindAffinity {
			u.Unreadable = err
		}
		return u, false
	}
	switch it.kind {
	case KindAffinity:
		a, err := ipam.DecodeAffinity(it.key, value, it.rev, it.deleted)
		if err != nil {
			log.WithError(err).WithField("key", it.key).Warn("skipping unreadable affinity")
			return u, false
		}
		u.Affinity, u.Name = a, a.Node+"/"+a.CIDR.String()
		return u, true
	}
	if it.deleted {
		return u, true
	}
	r, err := datastore.Decode(it.kind, value, it.rev)
	if err != nil {
		// Reported to the consumers that asked (ReportUnreadable),
		// which say what it means for them; skipped for the others.
		log.WithError(err).WithField("key", it.key).Warn("unreadable record")
		u.Unreadable, u.Value = err, d.kept(it)
		return u, false
	}
	d.sh.resource(r)
	u.Resource = r
	return u, true
}

// busyFor is how long the consumer's OnBatch call in progress has run
// (0: none), for the fell-behind warning.
func (s *sub) busyFor() time.Duration {
	since := s.busySince.Load()
	if since == 0 {
		return 0
	}
	return time.Since(time.Unix(0, since)).Round(time.Millisecond)
}
