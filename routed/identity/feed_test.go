package identity

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/routed/noderecord"
)

// feedRecorder counts what reaches a consumer behind the gate (what
// felix and confd would have got).
type feedRecorder struct {
	mu        sync.Mutex
	snapshots int
	nodes     int // Nodes in the consumer's state
	deletes   int
	state     map[string]bool
}

func (r *feedRecorder) OnBatch(b feed.Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.Snapshot {
		r.snapshots++
		r.state = map[string]bool{}
	}
	for _, u := range b.Updates {
		if u.Deleted {
			r.deletes++
			delete(r.state, u.Name)
		} else {
			r.state[u.Name] = true
		}
	}
	r.nodes = len(r.state)
}

func (r *feedRecorder) get() (snapshots, nodes, deletes int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshots, r.nodes, r.deletes
}

// String says what the consumer has got, for a wait's message.
func (r *feedRecorder) String() string {
	s, n, d := r.get()
	return fmt.Sprintf("%d snapshots, %d Nodes, %d deletes", s, n, d)
}

// heldMsg is a wait's message for a feed expected to hold: "" once it
// does, else why not with what the guard says.
func heldMsg(what string, fd *feed.Feed, g *Guard) string {
	if fd.Held() {
		return ""
	}
	frozen, why := g.Frozen()
	return fmt.Sprintf("%s: not held (guard frozen %v %q)", what, frozen, why)
}

// guardWithNodes starts a guard on a fresh datastore holding the Nodes
// named (registered at addr, which it returns); the guard stops when the
// test ends.
func guardWithNodes(t *testing.T, nodes ...string) (context.Context, *datastore.Client, *Guard, noderecord.Addresses) {
	t.Helper()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := New(ds, t.TempDir())
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.9/24")}
	for _, n := range nodes {
		if _, err := noderecord.Register(ctx, ds, n, addr); err != nil {
			t.Fatal(err)
		}
	}
	return ctx, ds, g, addr
}

// TestWipeHoldsTheFeed reproduces the wipe as etcd delivers it (every key
// deleted in one request: a delete event per key, the identity among
// them) and checks that none of those deletes reaches a consumer of the
// node feed, that the node keeper writes nothing into the wiped
// datastore, and that restoring the keys releases the consumers with a
// fresh snapshot.
func TestWipeHoldsTheFeed(t *testing.T) {
	t.Parallel()
	ctx, ds, g, addr := guardWithNodes(t, "wipe-a", "wipe-b", "wipe-c")
	behind := &feedRecorder{}
	keeper := noderecord.NewKeeper("wipe-a", addr)
	fd := feed.New(ds, feed.Options{Gate: g})
	fd.Subscribe("recorder", []api.Kind{api.KindNode}, behind)
	fd.Subscribe("keeper", noderecord.Kinds, keeper)
	go func() { _ = fd.Run(ctx) }()
	go func() { _ = keeper.Run(ctx, ds) }()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if _, n, _ := behind.get(); n != 3 {
			return "the consumer never saw the three Nodes: " + behind.String()
		}
		return ""
	})

	all, err := ds.Etcd().Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := ds.Etcd().Delete(ctx, "\x00", clientv3.WithFromKey()); err != nil {
		t.Fatal(err)
	}
	// Positive event: the feed got the wipe and holds its consumers.
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		return heldMsg("the feed did not hold its consumers after the wipe", fd, g)
	})
	frozen, why := g.Frozen()
	if !frozen {
		t.Fatal("the feed holds but the guard is not frozen")
	}
	t.Logf("held %s after the wipe: %s", time.Since(start).Round(time.Microsecond), why)
	if _, _, d := behind.get(); d != 0 {
		t.Fatalf("%d of the wipe's deletes reached a consumer", d)
	}
	if resp, err := ds.Etcd().Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("something was written into the wiped datastore: %d keys, %v", resp.Count, err)
	}

	// Restore the keys (a backup): the guard thaws and the consumers get
	// a fresh snapshot holding the three Nodes.
	snaps, _, _ := behind.get()
	ops := make([]clientv3.Op, 0, len(all.Kvs))
	for _, kv := range all.Kvs {
		ops = append(ops, clientv3.OpPut(string(kv.Key), string(kv.Value)))
	}
	restored := time.Now()
	if _, err := ds.Etcd().Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if s, n, _ := behind.get(); s <= snaps || n != 3 {
			return fmt.Sprintf("no fresh snapshot with the three Nodes after the restore (had %d snapshots): %s", snaps, behind)
		}
		return ""
	})
	t.Logf("resumed %s after the restore", time.Since(restored).Round(time.Millisecond))
	if frozen, why := g.Frozen(); frozen {
		t.Fatalf("still frozen after the restore: %s", why)
	}
	if _, _, d := behind.get(); d != 0 {
		t.Fatalf("%d deletes reached a consumer", d)
	}
}

// TestIdentityDeletedFirstHoldsLaterDeletes: a wipe done key by key,
// the identity first, as a tool deleting the keys in order would. The
// feed is ordered, so the later deletes arrive after the identity's and
// are held; the guard never reads etcd for them.
func TestIdentityDeletedFirstHoldsLaterDeletes(t *testing.T) {
	t.Parallel()
	ctx, ds, g, _ := guardWithNodes(t, "kbk-a", "kbk-b")
	behind := &feedRecorder{}
	fd := feed.New(ds, feed.Options{Gate: g})
	fd.Subscribe("recorder", []api.Kind{api.KindNode}, behind)
	go func() { _ = fd.Run(ctx) }()
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if _, n, _ := behind.get(); n != 2 {
			return "the consumer never saw the two Nodes: " + behind.String()
		}
		return ""
	})
	if _, err := ds.Etcd().Delete(ctx, "/routed/v1/clusterinformation/default"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"kbk-a", "kbk-b"} {
		if _, err := ds.Etcd().Delete(ctx, "/routed/v1/nodes/"+n); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		return heldMsg("the feed did not hold after the identity went", fd, g)
	})
	// A later write proves the feed has gone past the deletes.
	put, err := ds.Etcd().Put(ctx, "/routed/v1/nodes/kbk-z", `{"apiVersion":"routed.io/v1","kind":"Node","metadata":{"name":"kbk-z"}}`)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if rev := fd.Revision(); rev < put.Header.Revision {
			return fmt.Sprintf("the feed never read the later write (revision %d): at %d", put.Header.Revision, rev)
		}
		return ""
	})
	if _, n, d := behind.get(); d != 0 || n != 2 {
		t.Fatalf("consumer saw %d deletes and holds %d Nodes; want 0 and 2", d, n)
	}
}
