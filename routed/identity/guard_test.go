package identity

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestDatastoreGuard walks the guard through what makes a node hold
// still and what lets it go on, on a real etcd.
func TestDatastoreGuard(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	dir := t.TempDir()
	g := New(ds, dir)
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	want := func(frozen bool, reason string) {
		t.Helper()
		if err := g.Check(ctx); err != nil {
			t.Fatal(err)
		}
		f, why := g.Frozen()
		if f != frozen || !strings.Contains(why, reason) {
			t.Fatalf("frozen %v (%q), want %v (%q)", f, why, frozen, reason)
		}
	}
	want(false, "")
	ci, err := ds.GetClusterInfo(ctx, 0)
	if err != nil || ci.GUID == "" || !ci.DatastoreReady {
		t.Fatalf("the first node did not initialise the identity: %+v %v", ci, err)
	}

	if _, err := ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	want(true, "marked not ready")
	if _, err := ds.SetDatastoreReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	want(false, "")

	// Another cluster's identity.
	other, _ := json.Marshal(datastore.ClusterInfo{GUID: "other", DatastoreReady: true, Created: time.Now()})
	if _, err := ds.Etcd().Put(ctx, datastore.ClusterInfoKey, string(other)); err != nil {
		t.Fatal(err)
	}
	want(true, "belongs to another cluster")
	if _, err := ds.Etcd().Delete(ctx, datastore.ClusterInfoKey); err != nil {
		t.Fatal(err)
	}
	want(true, "no cluster identity")

	// A restarted routed remembers: it freezes at start, writes nothing.
	g2 := New(ds, dir)
	g.Save()
	if err := g2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if f, why := g2.Frozen(); !f || !strings.Contains(why, "no cluster identity") {
		t.Fatalf("restarted node on a wiped datastore: frozen %v %q", f, why)
	}
	if _, err := ds.GetClusterInfo(ctx, 0); err == nil {
		t.Fatal("a node that remembers its cluster created a new identity")
	}

	// The operator accepts the datastore: every node adopts it.
	if _, err := ds.ReinitClusterInfo(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	want(false, "")

	// Back in time: a restore of an older backup.
	g.mu.Lock()
	g.maxRev += 1000
	g.mu.Unlock()
	want(true, "went back in time")
}

// TestReinitIsNotAdoptedForever: a re-initialised datastore is adopted by
// the nodes that were held on it, but not, long after, by a node of
// another cluster pointed at it by mistake; that node holds still.
func TestReinitIsNotAdoptedForever(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	if _, err := ds.ReinitClusterInfo(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A node that remembers another cluster, inside the window: adopts.
	inside := New(ds, t.TempDir())
	inside.guid = "a-held-node"
	if err := inside.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if frozen, _ := inside.Frozen(); frozen {
		_, why := inside.Frozen()
		t.Fatalf("a held node did not adopt the re-initialised datastore: %s", why)
	}
	// The same record, its window closed.
	ci, err := ds.GetClusterInfo(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ci.AdoptUntil = time.Now().Add(-time.Minute)
	b, _ := json.Marshal(ci)
	if _, err := ds.Etcd().Put(ctx, datastore.ClusterInfoKey, string(b)); err != nil {
		t.Fatal(err)
	}
	stranger := New(ds, t.TempDir())
	stranger.guid = "another-cluster"
	if err := stranger.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if frozen, _ := stranger.Frozen(); !frozen {
		t.Fatal("a node of another cluster adopted a datastore re-initialised long ago")
	}
	if _, why := stranger.Frozen(); !strings.Contains(why, "belongs to another cluster") {
		t.Fatalf("reason: %q", why)
	}
}
