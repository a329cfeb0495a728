package gc

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestTrustJudges: the stateless check of routed cluster-gc holds the
// pass while there is no identity or the datastore is not ready, lets
// it run once both are there, holds while the datastore is another
// cluster's and goes on once it is back, adopts an identity routedctl
// datastore reinit wrote within its window, and holds after a revision
// that went back until such an identity comes.
func TestTrustJudges(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ci := func(guid string, ready bool, rev int64) *datastore.ClusterInfo {
		return &datastore.ClusterInfo{GUID: guid, DatastoreReady: ready, Revision: rev}
	}
	reinit := func(guid string, rev int64) *datastore.ClusterInfo {
		return &datastore.ClusterInfo{GUID: guid, DatastoreReady: true, Revision: rev, AdoptUntil: t0.Add(time.Hour)}
	}
	type step struct {
		ci   *datastore.ClusterInfo
		err  error
		want string // "" trusted, else a word of the reason
	}
	run := func(name string, steps []step) {
		tr := &Trust{now: func() time.Time { return t0 }}
		for i, s := range steps {
			got := tr.judgeLocked(s.ci, s.err)
			if (s.want == "") != (got == "") || !strings.Contains(got, s.want) {
				t.Fatalf("%s, step %d: reason %q, want one saying %q", name, i, got, s.want)
			}
		}
	}
	run("identity", []step{
		{&datastore.ClusterInfo{Revision: 1}, datastore.ErrNoClusterInfo, "no cluster identity"},
		{nil, errors.New("etcd unreachable"), "cannot read"},
		{ci("a", false, 5), nil, "not ready"},
		{ci("a", true, 6), nil, ""},
		{ci("c", true, 3), nil, "another cluster"},
		{ci("a", true, 9), nil, ""}, // back: no revision judged against c's
		{reinit("b", 10), nil, ""},
		{ci("b", true, 11), nil, ""},
		{ci("a", true, 12), nil, "another cluster"}, // a's window is not b's
	})
	run("rollback", []step{
		{ci("a", true, 100), nil, ""},
		{ci("a", true, 120), nil, ""},
		{ci("a", true, 90), nil, "back in time"},
		{ci("a", true, 130), nil, "back in time"}, // later writes do not undo it
		{reinit("z", 131), nil, ""},
		{ci("z", true, 140), nil, ""},
	})
}

// TestTrustReadsTheDatastore: Held reads the real identity record.
func TestTrustReadsTheDatastore(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	tr := NewTrust(context.Background(), ds)
	if !tr.Held() || !strings.Contains(tr.Reason(), "no cluster identity") {
		t.Fatalf("empty datastore: reason %q", tr.Reason())
	}
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if tr.Held() {
		t.Fatalf("initialised datastore held: %q", tr.Reason())
	}
	if _, err := ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !tr.Held() || !strings.Contains(tr.Reason(), "not ready") {
		t.Fatalf("not ready: reason %q", tr.Reason())
	}
}

// TestTrustConcurrentChecks: the elected process checks before each
// pass while its Run checks every 10 s; with writes going on, two
// checks at once never make a live datastore look rolled back (before,
// reads judged out of order did within a second).
func TestTrustConcurrentChecks(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	tr := NewTrust(ctx, ds)
	writes := make(chan struct{})
	go func() {
		defer close(writes)
		for i := 0; ctx.Err() == nil; i++ {
			_, _ = ds.Etcd().Put(ctx, "/routed/v1/test/churn", strconv.Itoa(i))
		}
	}()
	t.Cleanup(func() { cancel(); <-writes })
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 300 {
				tr.Held()
			}
		}()
	}
	wg.Wait()
	if r := tr.Reason(); r != "" {
		t.Fatalf("held on a live datastore: %s", r)
	}
}
