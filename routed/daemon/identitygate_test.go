package daemon

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// feedRecorder counts what reaches a handler; used on both sides of the
// gate (what etcd sent, what felix/confd would have got).
type feedRecorder struct {
	next datastore.Handler

	mu        sync.Mutex
	snapshots int
	nodes     int // Nodes in the last snapshot
	deletes   int
}

func (r *feedRecorder) OnSnapshot(s datastore.Snapshot) {
	if r.next != nil {
		r.next.OnSnapshot(s)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapshots++
	r.nodes = len(s.Resources[api.KindNode])
}

func (r *feedRecorder) OnEvent(e datastore.Event) {
	if r.next != nil {
		r.next.OnEvent(e)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Type == datastore.EventDelete {
		r.deletes++
	}
}

func (r *feedRecorder) get() (snapshots, nodes, deletes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshots, r.nodes, r.deletes
}

// TestWipeHoldsTheFeeds reproduces the wipe as etcd delivers it (every
// key deleted in one request: a delete event per resource, the identity
// among them) and checks that none of those deletes reaches the
// handlers behind the gate, that the node keeper writes nothing into the
// wiped datastore, and that restoring the keys resumes the feed from a
// fresh snapshot.
func TestWipeHoldsTheFeeds(t *testing.T) {
	t.Parallel()
	ds := newDS(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g := newDatastoreGuard(ds, t.TempDir())
	if err := g.start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"wipe-a", "wipe-b", "wipe-c"} {
		if _, err := RegisterNode(ctx, ds, n, Addresses{V4: netip.MustParsePrefix("10.0.0.9/24")}); err != nil {
			t.Fatal(err)
		}
	}
	behind := &feedRecorder{}
	keeper := newNodeKeeper("wipe-a", Addresses{V4: netip.MustParsePrefix("10.0.0.9/24")})
	fan := &datastore.Fanout{}
	fan.Add([]api.Kind{api.KindNode}, behind)
	fan.Add(nodeKeeperKinds, keeper)
	sent := &feedRecorder{next: gatedFeed{g, fan}}
	go func() {
		_ = g.restartable(func(ctx context.Context) error {
			return ds.Sync(ctx, []api.Kind{api.KindNode}, sent)
		})(ctx)
	}()
	go func() { _ = g.watch(ctx) }()
	go func() { _ = keeper.run(ctx, ds) }()
	waitFor(t, func() bool { _, n, _ := behind.get(); return n == 3 })

	all, err := ds.Etcd().Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := ds.Etcd().Delete(ctx, "\x00", clientv3.WithFromKey()); err != nil {
		t.Fatal(err)
	}
	// Positive event: etcd delivered the three Node deletes to the gate.
	waitFor(t, func() bool { _, _, d := sent.get(); return d == 3 })
	if frozen, why := g.Frozen(); !frozen {
		t.Fatal("the wipe's deletes went through and the guard is not frozen")
	} else {
		t.Logf("frozen %s after the wipe: %s", time.Since(start).Round(time.Microsecond), why)
	}
	if _, _, d := behind.get(); d != 0 {
		t.Fatalf("%d of the wipe's deletes reached felix/confd", d)
	}
	if resp, err := ds.Etcd().Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("something was written into the wiped datastore: %d keys, %v", resp.Count, err)
	}

	// Restore the keys (a backup): the guard thaws and the feed restarts
	// from a fresh snapshot holding the three Nodes.
	snaps, _, _ := behind.get()
	ops := make([]clientv3.Op, 0, len(all.Kvs))
	for _, kv := range all.Kvs {
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
	}
	restored := time.Now()
	if _, err := ds.Etcd().Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { s, n, _ := behind.get(); return s > snaps && n == 3 })
	t.Logf("resumed %s after the restore", time.Since(restored).Round(time.Millisecond))
	if frozen, why := g.Frozen(); frozen {
		t.Fatalf("still frozen after the restore: %s", why)
	}
	if _, _, d := behind.get(); d != 0 {
		t.Fatalf("%d deletes reached felix/confd", d)
	}
}
