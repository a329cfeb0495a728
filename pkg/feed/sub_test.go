package feed

import (
	"fmt"
	"runtime"
	"testing"
	"weak"

	dto "github.com/prometheus/client_model/go"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

func nodeItem(name string, rev int64, deleted bool) item {
	key := datastore.Key(api.KindNode, name)
	return item{kind: api.KindNode, key: key, name: name, deleted: deleted,
		rev: rev}
}

func queued(s *sub) (batches int, snapshot bool, items []item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return 0, false, nil
	}
	return len(s.queue), s.queue[0].snapshot, s.queue[0].flatten()
}

// A snapshot the consumer has not taken absorbs the changes after it:
// one queued batch, holding the state at the last change.
func TestQueuedSnapshotAbsorbsChanges(t *testing.T) {
	f := New(nil, Options{})
	s := newSub("c", []api.Kind{api.KindNode}, nil)
	s.pushSnapshot(f, 10, s.mine([]item{nodeItem("a", 5, false), nodeItem("b", 6, false)}), false)
	s.push(f, 11, []item{nodeItem("c", 11, false)})
	s.push(f, 12, []item{nodeItem("a", 12, true)})
	s.push(f, 13, []item{nodeItem("b", 13, false), nodeItem("d", 13, false), nodeItem("d", 13, true)})
	n, snap, items := queued(s)
	if n != 1 || !snap {
		t.Fatalf("%d queued batches (snapshot %v), want one snapshot", n, snap)
	}
	var got []string
	for _, it := range items {
		got = append(got, fmt.Sprintf("%s@%d", it.name, it.rev))
	}
	if fmt.Sprint(got) != "[b@13 c@11]" {
		t.Fatalf("snapshot holds %v, want [b@13 c@11]", got)
	}
	if s.pending != 2 {
		t.Fatalf("pending %d, want 2", s.pending)
	}
}

// A backlog past MaxPending merges to one change per object, in
// revision order, deletions kept; later changes fold into it.
func TestBacklogMergesPastMaxPending(t *testing.T) {
	f := New(nil, Options{})
	s := newSub("c", []api.Kind{api.KindNode}, nil)
	rev := int64(100)
	for i := range MaxPending {
		rev++
		s.push(f, rev, []item{nodeItem(fmt.Sprintf("n%d", i%10), rev, false)})
	}
	if n, _, _ := queued(s); n != MaxPending {
		t.Fatalf("%d batches queued before the limit, want %d", n, MaxPending)
	}
	rev++
	s.push(f, rev, []item{nodeItem("n3", rev, true)})
	rev++
	s.push(f, rev, []item{nodeItem("x", rev, false)})
	n, snap, items := queued(s)
	if n != 1 || snap {
		t.Fatalf("%d queued batches (snapshot %v), want one merged change batch", n, snap)
	}
	if len(items) != 11 || s.pending != 11 {
		t.Fatalf("%d items (pending %d), want 11: one per object", len(items), s.pending)
	}
	for i := 1; i < len(items); i++ {
		if items[i-1].rev > items[i].rev {
			t.Fatalf("merged items out of revision order at %d", i)
		}
	}
	if last, prev := items[10], items[9]; last.name != "x" || prev.name != "n3" || !prev.deleted {
		t.Fatalf("merged batch ends %s(deleted %v), %s; want the deletion of n3, then x", prev.name, prev.deleted, last.name)
	}
	if got := testCounter(t, f, "c"); got != 1 {
		t.Fatalf("fell-behind counter %v, want 1", got)
	}
}

func testCounter(t *testing.T, f *Feed, consumer string) float64 {
	t.Helper()
	c, err := f.metrics.overflows.GetMetricWithLabelValues(consumer)
	if err != nil {
		t.Fatal(err)
	}
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// OnlyNames drops the other objects of its kind by name, before
// decoding, in snapshots and changes alike; other kinds pass.
func TestOnlyNames(t *testing.T) {
	f := New(nil, Options{})
	s := newSub("c", []api.Kind{api.KindNode, api.KindIPPool}, nil)
	OnlyNames(api.KindNode, func(n string) bool { return n == "mine" })(s)
	pool := item{kind: api.KindIPPool, key: datastore.Key(api.KindIPPool, "p"), name: "p", rev: 3}
	s.pushSnapshot(f, 3, s.mine([]item{nodeItem("mine", 1, false), nodeItem("other", 2, false), pool}), false)
	s.push(f, 4, []item{nodeItem("other", 4, true)})
	s.push(f, 5, []item{nodeItem("mine", 5, true)})
	_, _, items := queued(s)
	var got []string
	for _, it := range items {
		got = append(got, it.name)
	}
	if fmt.Sprint(got) != "[p]" {
		t.Fatalf("queued %v, want [p]: mine deleted, other never seen", got)
	}
}

// A consumer takes its whole backlog of changes at once, in order.
func TestTakeJoinsQueuedChanges(t *testing.T) {
	f := New(nil, Options{})
	s := newSub("c", []api.Kind{api.KindNode}, nil)
	s.push(f, 1, []item{nodeItem("a", 1, false)})
	s.push(f, 2, []item{nodeItem("b", 2, false), nodeItem("c", 2, false)})
	s.push(f, 3, []item{nodeItem("a", 3, true)})
	s.mu.Lock()
	snap, rev, items := s.takeLocked()
	left, pending := len(s.queue), s.pending
	s.mu.Unlock()
	var got []string
	for _, it := range items {
		got = append(got, fmt.Sprintf("%s@%d", it.name, it.rev))
	}
	if snap || rev != 3 || fmt.Sprint(got) != "[a@1 b@2 c@2 a@3]" || left != 0 || pending != 0 {
		t.Fatalf("took snapshot %v rev %d %v, left %d (pending %d); want changes up to 3 [a@1 b@2 c@2 a@3], none left", snap, rev, got, left, pending)
	}
}

// TestDeliveredSnapshotIsReleased: once a consumer has its snapshot, the
// queue holds nothing of it (a consumer of a kind that rarely changes
// kept its whole snapshot, raw values and all, until its next change),
// and decoding lets go of each raw value.
func TestDeliveredSnapshotIsReleased(t *testing.T) {
	f := New(nil, Options{})
	s := newSub("c", []api.Kind{api.KindNode}, nil)
	items := []item{nodeItem("a", 5, false), nodeItem("b", 6, false)}
	for i := range items {
		items[i].value = []byte(`{"apiVersion":"routed.io/v1","kind":"Node","metadata":{"name":"x"}}`)
	}
	s.pushSnapshot(f, 10, s.mine(items), false)
	s.mu.Lock()
	queued := weak.Make(&s.queue[0].items[0])
	value := weak.Make(&s.queue[0].items[0].value[0])
	snapshot, rev, taken := s.takeLocked()
	s.mu.Unlock()
	items = nil
	b := decodeBatch(snapshot, rev, taken, nil, nil)
	if len(b.Updates) != 2 || b.Updates[0].Resource == nil {
		t.Fatalf("decoded %+v", b)
	}
	for _, it := range taken {
		if it.value != nil {
			t.Fatal("a decoded item still holds its raw value")
		}
	}
	taken = nil
	runtime.GC()
	if queued.Value() != nil || value.Value() != nil {
		t.Fatalf("after delivery the snapshot's items (%v) or a raw value (%v) are still reachable", queued.Value() != nil, value.Value() != nil)
	}
	if s.queue != nil || s.pending != 0 {
		t.Fatalf("queue %v, pending %d after delivery", s.queue, s.pending)
	}
	runtime.KeepAlive(b)
}
