package feed

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// batches records what a consumer was handed.
type batches struct {
	mu  sync.Mutex
	got []Batch
}

func (b *batches) OnBatch(x Batch) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.got = append(b.got, x)
}

func (b *batches) first(t *testing.T) Batch {
	t.Helper()
	testenv.Eventually(t, 5*time.Second, 5*time.Millisecond, func() string {
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.got) == 0 {
			return "the consumer got nothing"
		}
		return ""
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.got[0]
}

func nodeKV(name string, rev int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(datastore.Key(api.KindNode, name)), ModRevision: rev,
		Value: []byte(`{"apiVersion":"routed.io/v1","kind":"Node","metadata":{"name":"` + name + `"}}`)}
}

// listWithHead is a list at rev whose stream reports head as it ends.
func listWithHead(f *Feed, head int64, kvs ...*mvccpb.KeyValue) func(func(*mvccpb.KeyValue, error) bool) {
	return func(yield func(*mvccpb.KeyValue, error) bool) {
		for _, kv := range kvs {
			if !yield(kv, nil) {
				return
			}
		}
		f.OnListHead(head)
	}
}

func names(b Batch) string {
	var out []string
	for _, u := range b.Updates {
		out = append(out, fmt.Sprintf("%s deleted=%v", u.Name, u.Deleted))
	}
	return fmt.Sprint(out)
}

func startDelivery(t *testing.T, f *Feed) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, s := range f.subs {
		wg.Go(func() { s.deliver(ctx) })
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestListSnapshotWaitsForItsHead: a list read while etcd moved on (its
// head past the list's revision) is handed over only once the watch
// brought the feed there, with what was written meanwhile folded in: the
// consumer's first batch is the snapshot at the head, and the feed is
// synced only then.
func TestListSnapshotWaitsForItsHead(t *testing.T) {
	f := New(nil, Options{})
	rec := &batches{}
	f.Subscribe("c", []api.Kind{api.KindNode}, rec)
	startDelivery(t, f)
	f.OnListStream(listWithHead(f, 12, nodeKV("a", 5), nodeKV("b", 6)), 10, datastore.ListStart)
	s := f.subs[0]
	check := func(when string) {
		t.Helper()
		s.mu.Lock()
		holding, n := s.holding, len(s.queue)
		s.mu.Unlock()
		if !holding || n != 1 || f.Synced() {
			t.Fatalf("%s: holding %v, %d queued, synced %v; want the snapshot held, not synced", when, holding, n, f.Synced())
		}
	}
	check("after the list")
	f.OnEvents([]*clientv3.Event{{Type: clientv3.EventTypePut, Kv: nodeKV("c", 11)}}, 11)
	check("at revision 11 of 12")
	f.OnEvents([]*clientv3.Event{{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(datastore.Key(api.KindNode, "a")), ModRevision: 12}}}, 12)
	b := rec.first(t)
	if !b.Snapshot || b.Revision != 12 || names(b) != "[b deleted=false c deleted=false]" {
		t.Fatalf("first batch: snapshot %v at %d holding %s; want the snapshot at 12 holding b and c", b.Snapshot, b.Revision, names(b))
	}
	if !f.Synced() {
		t.Fatal("not synced once the snapshot was handed over")
	}
}

// TestListSnapshotWithoutWritesIsHandedAtOnce: a list at etcd's head
// (nothing written while it was read) goes to the consumers at once.
func TestListSnapshotWithoutWritesIsHandedAtOnce(t *testing.T) {
	f := New(nil, Options{})
	rec := &batches{}
	f.Subscribe("c", []api.Kind{api.KindNode}, rec)
	startDelivery(t, f)
	f.OnListStream(listWithHead(f, 10, nodeKV("a", 5)), 10, datastore.ListStart)
	if b := rec.first(t); !b.Snapshot || b.Revision != 10 || names(b) != "[a deleted=false]" || !f.Synced() {
		t.Fatalf("first batch: snapshot %v at %d holding %s, synced %v; want the snapshot at 10 holding a", b.Snapshot, b.Revision, names(b), f.Synced())
	}
}

// TestListSnapshotWaitIsBounded: a watch that delivers nothing more
// after the list (etcd lost right after it) no longer keeps the held
// snapshot from the consumers once maxCatchUp has passed.
func TestListSnapshotWaitIsBounded(t *testing.T) {
	defer func(d time.Duration) { maxCatchUp = d }(maxCatchUp)
	maxCatchUp = 300 * time.Millisecond
	f := New(nil, Options{})
	rec := &batches{}
	f.Subscribe("c", []api.Kind{api.KindNode}, rec)
	startDelivery(t, f)
	f.OnListStream(listWithHead(f, 12, nodeKV("a", 5)), 10, datastore.ListStart)
	s := f.subs[0]
	s.mu.Lock()
	holding := s.holding
	s.mu.Unlock()
	if !holding || f.Synced() {
		t.Fatalf("after the list: holding %v, synced %v; want the snapshot held", holding, f.Synced())
	}
	// Nothing more from the stream: only the bound lets go.
	if b := rec.first(t); !b.Snapshot || b.Revision != 10 || names(b) != "[a deleted=false]" || !f.Synced() {
		t.Fatalf("first batch: snapshot %v at %d holding %s, synced %v; want the snapshot at 10 once the wait's bound passed", b.Snapshot, b.Revision, names(b), f.Synced())
	}
}
