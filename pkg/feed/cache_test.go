package feed_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/datastore/listcache"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
)

// snapshotRecorder keeps each batch it gets, whole.
type snapshotRecorder struct {
	mu      sync.Mutex
	batches []feed.Batch
}

func (r *snapshotRecorder) OnBatch(b feed.Batch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.batches = append(r.batches, b)
}

// first waits for the first batch.
func (r *snapshotRecorder) first(t *testing.T) feed.Batch {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.batches) == 0 {
			return "no batch yet"
		}
		return ""
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.batches[0]
}

// render is a batch's updates as comparable lines (everything but the
// order, which a snapshot does not promise).
func render(t *testing.T, b feed.Batch) string {
	t.Helper()
	var lines []string
	for _, u := range b.Updates {
		j, err := json.Marshal(u)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, string(j))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

var cachedKinds = []api.Kind{api.KindNode, api.KindIPPool, feed.KindAffinity, feed.KindBorrowed}

// runCachedFeed runs a feed with a cache at path (none when ""), one
// consumer of cachedKinds; stop stops it as SIGTERM does and waits.
func runCachedFeed(t *testing.T, ds *datastore.Client, path string) (fd *feed.Feed, r *snapshotRecorder, stop func()) {
	t.Helper()
	opt := feed.Options{}
	if path != "" {
		c, err := listcache.New(listcache.Options{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		opt.Cache = c
	}
	fd, r = feed.New(ds, opt), &snapshotRecorder{}
	fd.Subscribe("all", cachedKinds, r)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = fd.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Error("the feed did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return fd, r, stop
}

// TestFeedRestartFromCache: a feed restarted from its cache after
// changes made while it was down (nodes created and deleted, a pool
// edited, addresses assigned and borrowed) hands its consumer exactly
// the snapshot a feed that lists hands, at no older a revision than
// etcd's when it started, and is synced only then.
func TestFeedRestartFromCache(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ic := ipam.New(ds)
	pool(t, ds, "p1", "10.60.0.0/16", 26)
	for i := range 30 {
		dstest.Apply(t, ds, node(fmt.Sprintf("n%d", i)))
	}
	assign(t, ic, "n1", "pod-a")
	path := filepath.Join(t.TempDir(), "feed-cache")

	_, r1, stop1 := runCachedFeed(t, ds, path)
	r1.first(t)
	stop1()

	for i := 30; i < 40; i++ {
		dstest.Apply(t, ds, node(fmt.Sprintf("n%d", i)))
	}
	for i := range 5 {
		if err := ds.Delete(context.Background(), api.KindNode, fmt.Sprintf("n%d", 20+i), ""); err != nil {
			t.Fatal(err)
		}
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p1}\nspec: {cidr: 10.60.0.0/16, blockSize: 26, natOutgoing: true}\n")
	assign(t, ic, "n2", "pod-b")
	assign(t, ic, "n3", "pod-c")
	resp, err := ds.Etcd().Get(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	atStart := resp.Header.Revision

	fd2, r2, _ := runCachedFeed(t, ds, path)
	fresh, r3, _ := runCachedFeed(t, ds, "")
	got, want := r2.first(t), r3.first(t)
	if !got.Snapshot || got.Revision < atStart {
		t.Fatalf("first batch: snapshot %v at %d; want a snapshot at >= %d", got.Snapshot, got.Revision, atStart)
	}
	if !fd2.Synced() || !fresh.Synced() {
		t.Fatal("not synced after the snapshot")
	}
	if g, w := render(t, got), render(t, want); g != w {
		t.Fatalf("snapshot from the cache differs from a fresh list's:\n got %s\nwant %s", g, w)
	}
	m := metricsText(t, fd2)
	for _, want := range []string{`routed_feed_lists_total{reason="cache"} 1`, "routed_feed_cache_restores_total 1"} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %q:\n%s", want, m)
		}
	}
}
