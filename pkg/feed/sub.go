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
	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// item is an update before decoding: the feed's goroutine only moves raw
// values, each consumer's goroutine decodes its own copy (consumers may
// change what they are given).
type item struct {
	kind     api.Kind
	key      string
	name     string
	kv       *mvccpb.KeyValue // resource and affinity kinds
	deleted  bool
	rev      int64
	block    netip.Prefix
	borrowed map[netip.Addr]string
}

// pendingBatch is one entry of a consumer's queue: a list of items in
// revision order, or (merged) the latest item of each object, keyed by
// object. A merged snapshot holds only present objects; a merged change
// batch keeps deletions.
type pendingBatch struct {
	snapshot bool
	rev      int64
	items    []item
	merged   map[string]item
}

func (b *pendingBatch) size() int {
	if b.merged != nil {
		return len(b.merged)
	}
	return len(b.items)
}

// merge folds items (later than everything in b) into b's map.
func (b *pendingBatch) merge(items []item) {
	for _, it := range items {
		if b.snapshot && it.isDeletion() {
			delete(b.merged, it.objectKey())
		} else {
			b.merged[it.objectKey()] = it
		}
	}
}

// flatten returns b's items: a merged batch's in revision order (a
// snapshot's by key, their order does not matter but is stable).
func (b *pendingBatch) flatten() []item {
	if b.merged == nil {
		return b.items
	}
	out := make([]item, 0, len(b.merged))
	for _, it := range b.merged {
		out = append(out, it)
	}
	slices.SortFunc(out, func(x, y item) int {
		if !b.snapshot {
			if c := cmp.Compare(x.revision(), y.revision()); c != 0 {
				return c
			}
		}
		return strings.Compare(x.objectKey(), y.objectKey())
	})
	return out
}

// objectKey names the object an item is about.
func (it item) objectKey() string {
	if it.kind == KindBorrowed {
		return "borrowed:" + it.block.String()
	}
	return it.key
}

func (it item) isDeletion() bool {
	if it.kind == KindBorrowed {
		return len(it.borrowed) == 0
	}
	return it.deleted
}

func (it item) revision() int64 {
	if it.kv != nil {
		return it.kv.ModRevision
	}
	return it.rev
}

// sub is one consumer: its kinds, its queue and its delivery goroutine.
type sub struct {
	name  string
	kinds map[api.Kind]bool
	keep  map[api.Kind]func(name string) bool // OnlyNames
	c     Consumer
	wake  chan struct{}

	mu      sync.Mutex
	queue   []pendingBatch
	pending int // items in queue

	busySince atomic.Int64 // unix nanoseconds of the OnBatch call in progress; 0: none
}

func newSub(name string, kinds []api.Kind, c Consumer) *sub {
	s := &sub{name: name, kinds: map[api.Kind]bool{}, keep: map[api.Kind]func(string) bool{}, c: c, wake: make(chan struct{}, 1)}
	for _, k := range kinds {
		s.kinds[k] = true
	}
	return s
}

func (s *sub) mine(items []item) []item {
	var out []item
	for _, it := range items {
		if !s.kinds[it.kind] {
			continue
		}
		if keep := s.keep[it.kind]; keep != nil && !keep(it.name) {
			continue
		}
		out = append(out, it)
	}
	return out
}

// pushSnapshot replaces the consumer's queue with the state at rev (on
// the feed's goroutine): everything queued before it is superseded. It
// stays mergeable until the consumer takes it, so changes that arrive
// meanwhile fold into it instead of queueing behind it.
func (s *sub) pushSnapshot(f *Feed, rev int64, items []item) {
	f.metrics.snapshots.WithLabelValues(s.name).Inc()
	b := pendingBatch{snapshot: true, rev: rev, merged: map[string]item{}}
	b.merge(s.mine(items))
	s.mu.Lock()
	s.queue = []pendingBatch{b}
	s.pending = b.size()
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
	case n > 0 && s.queue[n-1].merged != nil:
		last := &s.queue[n-1]
		s.pending -= last.size()
		last.merge(mine)
		last.rev = rev
		s.pending += last.size()
	case s.pending+len(mine) > MaxPending:
		f.metrics.overflows.WithLabelValues(s.name).Inc()
		f.log.WithFields(logrus.Fields{"consumer": s.name, "pending": s.pending + len(mine)}).
			Warn("consumer fell behind; its backlog is merged to the latest change of each object")
		b := pendingBatch{rev: rev, merged: map[string]item{}}
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
			if len(s.queue) == 0 {
				s.mu.Unlock()
				break
			}
			snapshot, rev, items := s.takeLocked()
			s.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			s.busySince.Store(time.Now().UnixNano())
			s.c.OnBatch(decodeBatch(snapshot, rev, items))
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
		s.queue = s.queue[1:]
		s.pending -= b.size()
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
	s.queue = s.queue[n:]
	s.pending = 0
	for _, q := range s.queue {
		s.pending += q.size()
	}
	return false, rev, items
}

func decodeBatch(snapshot bool, rev int64, items []item) Batch {
	out := Batch{Snapshot: snapshot, Revision: rev}
	ups := make([]Update, len(items))
	ok := make([]bool, len(items))
	decodeRange := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			ups[i], ok[i] = decodeItem(items[i])
		}
	}
	if workers := runtime.GOMAXPROCS(0); len(items) >= parallelDecode && workers > 1 {
		var wg sync.WaitGroup
		per := (len(items) + workers - 1) / workers
		for lo := 0; lo < len(items); lo += per {
			wg.Go(func() { decodeRange(lo, min(lo+per, len(items))) })
		}
		wg.Wait()
	} else {
		decodeRange(0, len(items))
	}
	n := 0
	for i := range ups {
		if ok[i] {
			ups[n] = ups[i]
			n++
		}
	}
	clear(ups[n:])
	out.Updates = ups[:n]
	return out
}

func decodeItem(it item) (Update, bool) {
	u := Update{Kind: it.kind, Name: it.name, Deleted: it.deleted, Revision: it.rev}
	switch it.kind {
	case KindBorrowed:
		u.Name, u.Block, u.Borrowed = it.block.String(), it.block, maps.Clone(it.borrowed)
		if u.Borrowed == nil {
			u.Borrowed = map[netip.Addr]string{}
		}
		return u, true
	case KindAffinity:
		u.Revision = it.kv.ModRevision
		a, err := ipam.DecodeAffinity(it.key, it.kv.Value, it.kv.ModRevision, it.deleted)
		if err != nil {
			log.WithError(err).WithField("key", it.key).Warn("skipping unreadable affinity")
			return u, false
		}
		u.Affinity, u.Name = a, a.Node+"/"+a.CIDR.String()
		return u, true
	}
	u.Revision = it.kv.ModRevision
	if it.deleted {
		return u, true
	}
	r, err := datastore.Decode(it.kind, it.kv.Value, it.kv.ModRevision)
	if err != nil {
		log.WithError(err).WithField("key", it.key).Warn("skipping unreadable record")
		return u, false
	}
	u.Resource = r
	return u, true
}
