package feed_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

// log is a consumer that keeps every update it got, in order, and the
// state they make.
type recorder struct {
	mu        sync.Mutex
	order     []string // "Kind/name" or "-Kind/name", in delivery order
	state     map[string]api.Resource
	snapshots int
	// gate, when set, blocks every OnBatch until it is closed.
	gate chan struct{}
}

func newRecorder() *recorder { return &recorder{state: map[string]api.Resource{}} }

func (l *recorder) OnBatch(b feed.Batch) {
	if l.gate != nil {
		<-l.gate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b.Snapshot {
		l.snapshots++
		l.state = map[string]api.Resource{}
	}
	for _, u := range b.Updates {
		key := string(u.Kind) + "/" + u.Name
		if u.Deleted {
			delete(l.state, key)
			l.order = append(l.order, "-"+key)
		} else {
			l.state[key] = u.Resource
			l.order = append(l.order, key)
		}
	}
}

func (l *recorder) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		if cond() {
			return ""
		}
		return fmt.Sprintf("waiting for %s; %d snapshots, order %v", what, l.snapshots, l.order)
	})
}

func node(name string) string {
	return fmt.Sprintf("apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: %s}\nspec: {bgp: {ipv4Address: 10.0.0.5/24}}\n", name)
}

func poolYAML(name, cidr string) string {
	return fmt.Sprintf("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: %s}\nspec: {cidr: %s}\n", name, cidr)
}

// TestOrderedAcrossKinds: changes to different kinds reach a consumer in
// the order etcd made them (each kind used to be its own watch, merged in
// no order), and each consumer sees only its kinds.
func TestOrderedAcrossKinds(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	dstest.Apply(t, ds, node("n0"))
	both, nodesOnly := newRecorder(), newRecorder()
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("both", []api.Kind{api.KindNode, api.KindIPPool}, both)
		fd.Subscribe("nodes", []api.Kind{api.KindNode}, nodesOnly)
	})
	both.wait(t, "the snapshot", func() bool { return both.snapshots == 1 && len(both.state) == 1 })
	var want []string
	for i := range 20 {
		if i%2 == 0 {
			dstest.Apply(t, ds, node(fmt.Sprintf("n%d", i+1)))
			want = append(want, fmt.Sprintf("Node/n%d", i+1))
		} else {
			dstest.Apply(t, ds, poolYAML(fmt.Sprintf("p%d", i), fmt.Sprintf("10.%d.0.0/16", 100+i)))
			want = append(want, fmt.Sprintf("IPPool/p%d", i))
		}
	}
	// Keys outside the subscribed kinds never show up.
	if _, err := ds.Etcd().Put(context.Background(), datastore.KeyPrefix+"ipam/handles/x", "{}"); err != nil {
		t.Fatal(err)
	}
	both.wait(t, "all 20 changes", func() bool { return len(both.order) == 21 })
	got := both.order[1:] // after the snapshot's n0
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("order\n got %v\nwant %v", got, want)
	}
	nodesOnly.wait(t, "the nodes", func() bool { return len(nodesOnly.state) == 11 })
	for _, o := range nodesOnly.order {
		if !strings.HasPrefix(o, "Node/") {
			t.Fatalf("the Node-only consumer got %s", o)
		}
	}
}

// TestSlowConsumerDoesNotStallOthers reproduces what a slow BGP push did
// to felix (one feed calling consumers one after another): a consumer
// stuck in OnBatch holds up no other consumer, is reported as stalled,
// and when it comes back it catches up: once it has fallen more than
// MaxPending updates behind, its backlog is merged to one change per
// object, never replaced by a snapshot built on the feed's goroutine.
func TestSlowConsumerDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	slow, fast := newRecorder(), newRecorder()
	fd := startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("slow", []api.Kind{api.KindNode}, slow)
		fd.Subscribe("fast", []api.Kind{api.KindNode}, fast)
	})
	fast.wait(t, "the first snapshot", func() bool { return fast.snapshots == 1 })
	slow.wait(t, "the first snapshot", func() bool { return slow.snapshots == 1 })
	slow.mu.Lock()
	slow.gate = make(chan struct{})
	slow.mu.Unlock()
	dstest.Apply(t, ds, node("wedge"))
	fast.wait(t, "the node while the other consumer is stuck", func() bool { return len(fast.state) == 1 })
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() string {
		if name, _ := fd.Stalled(time.Now(), 50*time.Millisecond); name != "slow" {
			return "the stuck consumer is not reported as stalled"
		}
		return ""
	})

	// Fall behind by more than MaxPending updates, in a few big writes.
	const n = feed.MaxPending + 100
	for i := 0; i < n; i += 128 {
		var ops []clientv3.Op
		for j := i; j < min(i+128, n); j++ {
			name := fmt.Sprintf("bulk-%05d", j)
			ops = append(ops, clientv3.OpPut(datastore.Key(api.KindNode, name),
				`{"apiVersion":"routed.io/v1","kind":"Node","metadata":{"name":"`+name+`"},"spec":{"bgp":{"ipv4Address":"10.0.0.5/24"}}}`))
		}
		if _, err := ds.Etcd().Txn(context.Background()).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// Rewrite and delete some of them while the consumer is still away:
	// the merged backlog carries only each object's last change.
	for j := range 50 {
		name := fmt.Sprintf("bulk-%05d", j)
		if _, err := ds.Etcd().Delete(context.Background(), datastore.Key(api.KindNode, name)); err != nil {
			t.Fatal(err)
		}
	}
	fast.wait(t, "every node", func() bool { return len(fast.state) == n+1-50 })
	close(slow.gate)
	slow.wait(t, "every node after it came back", func() bool { return len(slow.state) == n+1-50 })
	slow.mu.Lock()
	defer slow.mu.Unlock()
	if slow.snapshots != 1 {
		t.Fatalf("the consumer that fell %d updates behind got %d snapshots, want 1 (its backlog merged)", n, slow.snapshots)
	}
	// 1 snapshot item, the wedge, then at most one change per object.
	if max := 2 + n; len(slow.order) > max {
		t.Fatalf("the consumer got %d updates after falling behind, more than one per object (%d)", len(slow.order), max)
	}
	for _, k := range slow.order[len(slow.order)-50:] {
		if !strings.HasPrefix(k, "-Node/bulk-") {
			t.Fatalf("the merged backlog does not end with the deletions in revision order: %v", slow.order[len(slow.order)-50:])
		}
	}
	if fast.snapshots != 1 {
		t.Fatalf("the consumer that kept up got %d snapshots, want 1", fast.snapshots)
	}
}

// flipGate holds until open is set; it reads no datastore.
type flipGate struct {
	mu   sync.Mutex
	open bool
	asks int
}

func (g *flipGate) Admit(*datastore.ClusterInfo, int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asks++
	return g.open
}

func (g *flipGate) Seen(int64) {}

// TestRejudgeReleasesWithAFreshList: a gate that changes its mind by
// itself (its work done, no datastore write) lets the consumers go
// through Rejudge, with a snapshot of the datastore as it is then, read
// by a new list; IPAM handles, which nobody subscribes to, are neither
// listed nor delivered.
func TestRejudgeReleasesWithAFreshList(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	dstest.Apply(t, ds, node("before"))
	for i := range 3 {
		if _, err := ds.Etcd().Put(context.Background(), fmt.Sprintf("%sipam/handles/h%d", datastore.KeyPrefix, i), "{}"); err != nil {
			t.Fatal(err)
		}
	}
	g := &flipGate{}
	rec := newRecorder()
	fd := startFeed(t, ds, feed.Options{Gate: g}, func(fd *feed.Feed) {
		fd.Subscribe("rec", []api.Kind{api.KindNode}, rec)
	})
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() string {
		if !fd.Held() {
			return "the feed does not hold"
		}
		return ""
	})
	dstest.Apply(t, ds, node("while-held"))
	g.mu.Lock()
	g.open = true
	g.mu.Unlock()
	fd.Rejudge()
	rec.wait(t, "a snapshot with both nodes", func() bool { return rec.snapshots == 1 && len(rec.state) == 2 })
	if fd.Held() {
		t.Fatal("the feed still says it holds after the snapshot went out")
	}
	body := metricsText(t, fd)
	for _, want := range []string{`routed_feed_lists_total{reason="requested"} 1`, `routed_feed_lists_total{reason="start"} 1`, `routed_feed_snapshots_total{consumer="rec"} 1`} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %q:\n%s", want, body)
		}
	}
	dstest.Apply(t, ds, node("after"))
	rec.wait(t, "the change after the release", func() bool { return len(rec.state) == 3 })
}

func metricsText(t testing.TB, fd *feed.Feed) string {
	t.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range fd.Collectors() {
		reg.MustRegister(c)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}
