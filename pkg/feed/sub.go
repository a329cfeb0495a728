package feed

import (
	"context"
	"maps"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

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

type pendingBatch struct {
	snapshot bool
	rev      int64
	items    []item
}

// sub is one consumer: its kinds, its queue and its delivery goroutine.
type sub struct {
	name  string
	kinds map[api.Kind]bool
	c     Consumer
	wake  chan struct{}

	mu      sync.Mutex
	queue   []pendingBatch
	pending int // items in queue

	busySince atomic.Int64 // unix nanoseconds of the OnBatch call in progress; 0: none
}

func newSub(name string, kinds []api.Kind, c Consumer) *sub {
	s := &sub{name: name, kinds: map[api.Kind]bool{}, c: c, wake: make(chan struct{}, 1)}
	for _, k := range kinds {
		s.kinds[k] = true
	}
	return s
}

// push queues a batch for the consumer (on the feed's goroutine): the
// items of its kinds, or a snapshot of them from f's cache. A queue past
// MaxPending is replaced by a snapshot.
func (s *sub) push(f *Feed, snapshot bool, rev int64, items []item) {
	var mine []item
	if !snapshot {
		for _, it := range items {
			if s.kinds[it.kind] {
				mine = append(mine, it)
			}
		}
		if len(mine) == 0 {
			return
		}
	}
	s.mu.Lock()
	if !snapshot && s.pending+len(mine) > MaxPending {
		f.metrics.overflows.WithLabelValues(s.name).Inc()
		f.log.WithField("consumer", s.name).Warn("consumer fell behind; its backlog is replaced by a snapshot")
		snapshot = true
	}
	if snapshot {
		mine = f.snapshotItems(s.kinds)
		s.queue, s.pending = nil, 0
	}
	s.queue = append(s.queue, pendingBatch{snapshot: snapshot, rev: rev, items: mine})
	s.pending += len(mine)
	s.mu.Unlock()
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
			b := s.queue[0]
			s.queue = s.queue[1:]
			s.pending -= len(b.items)
			s.mu.Unlock()
			if ctx.Err() != nil {
				return
			}
			s.busySince.Store(time.Now().UnixNano())
			s.c.OnBatch(decodeBatch(b))
			s.busySince.Store(0)
		}
	}
}

func decodeBatch(b pendingBatch) Batch {
	out := Batch{Snapshot: b.snapshot, Revision: b.rev, Updates: make([]Update, 0, len(b.items))}
	for _, it := range b.items {
		u, ok := decodeItem(it)
		if ok {
			out.Updates = append(out.Updates, u)
		}
	}
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
