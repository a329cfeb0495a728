package identity

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/routed/noderecord"
)

// trustRig is a node's feed behind a guard whose BeforeTrust hook the
// test drives: each run of the hook is announced on started and returns
// what the test sends on its result (or its context's error).
type trustRig struct {
	ds      *datastore.Client
	g       *Guard
	fd      *feed.Feed
	beat    *heartbeat.Beat
	behind  *feedRecorder
	started chan hookRun
	stop    context.CancelFunc // the daemon's SIGTERM, for the guard
	ran     chan struct{}      // closed when the guard's Run returned
}

type hookRun struct {
	ctx    context.Context
	result chan error
	ended  chan error // what the hook returned
}

func newTrustRig(t *testing.T) *trustRig {
	t.Helper()
	r := &trustRig{ds: dstest.Client(t), beat: &heartbeat.Beat{}, behind: &feedRecorder{},
		started: make(chan hookRun, 4), ran: make(chan struct{})}
	ctx := context.Background()
	r.g = New(r.ds, t.TempDir())
	if err := r.g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	addr := noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.9/24")}
	if _, err := noderecord.Register(ctx, r.ds, "trust-a", addr); err != nil {
		t.Fatal(err)
	}
	r.fd = feed.New(r.ds, feed.Options{Gate: r.g, Beat: r.beat})
	r.fd.Subscribe("recorder", []api.Kind{api.KindNode}, r.behind)
	r.g.BeforeTrust(func(ctx context.Context, doing func(string)) error {
		h := hookRun{ctx: ctx, result: make(chan error, 1), ended: make(chan error, 1)}
		doing("putting back 2 of its 5 pods")
		r.started <- h
		var err error
		select {
		case err = <-h.result:
		case <-ctx.Done():
			err = ctx.Err()
		}
		h.ended <- err
		return err
	}, r.fd.Rejudge)
	feedCtx, stopFeed := context.WithCancel(ctx)
	guardCtx, stopGuard := context.WithCancel(ctx)
	r.stop = stopGuard
	fed := make(chan struct{})
	go func() { _ = r.fd.Run(feedCtx); close(fed) }()
	go func() { _ = r.g.Run(guardCtx); close(r.ran) }()
	t.Cleanup(func() { stopGuard(); stopFeed(); <-r.ran; <-fed })
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if _, n, _ := r.behind.get(); n != 1 {
			return "the consumer never saw the Node: " + r.behind.String()
		}
		return ""
	})
	return r
}

// holdThenTrust marks the datastore not ready (the feed holds), then
// ready again: the guard starts the hook. It returns the hook's run.
func (r *trustRig) holdThenTrust(t *testing.T) hookRun {
	t.Helper()
	ctx := context.Background()
	if _, err := r.ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		return heldMsg("the feed did not hold when the datastore was marked not ready", r.fd, r.g)
	})
	if _, err := r.ds.SetDatastoreReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	return r.nextRun(t)
}

func (r *trustRig) nextRun(t *testing.T) hookRun {
	t.Helper()
	return receive(t, r.started, "BeforeTrust did not start")
}

func ended(t *testing.T, h hookRun, within time.Duration) error {
	t.Helper()
	select {
	case err := <-h.ended:
		return err
	case <-time.After(within):
		t.Fatalf("BeforeTrust did not end within %v", within)
		return nil
	}
}

// TestSlowBeforeTrustKeepsTheWatchRead: while BeforeTrust runs (as long
// as it likes), the feed goes on reading the watch, its heartbeat goes
// on and readiness says what the node does; the daemon's SIGTERM stops
// the hook at once and the guard's Run waits for it. The node keeps
// holding: it never follows a datastore the hook did not finish with.
func TestSlowBeforeTrustKeepsTheWatchRead(t *testing.T) {
	t.Parallel()
	r := newTrustRig(t)
	ctx := context.Background()
	h := r.holdThenTrust(t)
	since := time.Now()
	put, err := r.ds.Etcd().Put(ctx, "/routed/v1/nodes/trust-z", `{"apiVersion":"routed.io/v1","kind":"Node","metadata":{"name":"trust-z"}}`)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if rev := r.fd.Revision(); rev < put.Header.Revision {
			return fmt.Sprintf("the feed did not read the watch while BeforeTrust ran (write at revision %d): at %d", put.Header.Revision, rev)
		}
		return ""
	})
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if age, ok := r.beat.Age(time.Now()); !ok || age >= time.Since(since) {
			return fmt.Sprintf("the watch's heartbeat stopped while BeforeTrust ran: last beat %v ago (beaten %v), BeforeTrust started %v ago", age, ok, time.Since(since))
		}
		return ""
	})
	if f, why := r.g.Frozen(); !f || !strings.Contains(why, "putting back 2 of its 5 pods") || !r.fd.Held() {
		t.Fatalf("while BeforeTrust runs: held %v, frozen %v %q", r.fd.Held(), f, why)
	}
	if _, n, _ := r.behind.get(); n != 1 {
		t.Fatalf("the consumer followed the datastore while BeforeTrust ran: %d Nodes", n)
	}

	stopped := time.Now()
	r.stop()
	if err := ended(t, h, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("BeforeTrust ended with %v, want the daemon's cancellation", err)
	}
	select {
	case <-r.ran:
	case <-time.After(5 * time.Second):
		t.Fatal("the guard's Run did not return after its context ended")
	}
	t.Logf("BeforeTrust stopped %v after the daemon's context ended", time.Since(stopped).Round(time.Microsecond))
	if f, _ := r.g.Frozen(); !f || !r.fd.Held() {
		t.Fatal("the node followed the datastore after BeforeTrust was stopped")
	}
}

// TestBeforeTrustReleasesThroughTheFeed: when BeforeTrust succeeds the
// guard asks the feed to judge again, and the consumers get a fresh
// snapshot with no datastore write to carry it.
func TestBeforeTrustReleasesThroughTheFeed(t *testing.T) {
	t.Parallel()
	r := newTrustRig(t)
	ctx := context.Background()
	h := r.holdThenTrust(t)
	before, err := r.ds.Etcd().Get(ctx, datastore.ClusterInfoKey)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if rev := r.fd.Revision(); rev < before.Header.Revision {
			return fmt.Sprintf("the feed did not read up to the datastore's revision %d: at %d", before.Header.Revision, rev)
		}
		return ""
	})
	snaps, _, _ := r.behind.get()
	h.result <- nil
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if s, n, _ := r.behind.get(); s <= snaps || n != 1 {
			return fmt.Sprintf("no fresh snapshot after BeforeTrust succeeded (had %d snapshots): %s", snaps, r.behind)
		}
		return ""
	})
	if f, why := r.g.Frozen(); f || r.fd.Held() {
		t.Fatalf("after BeforeTrust succeeded: held %v, frozen %q", r.fd.Held(), why)
	}
	after, err := r.ds.Etcd().Get(ctx, datastore.ClusterInfoKey)
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision {
		t.Fatalf("the datastore was written (revision %d -> %d): the release did not come from the guard alone",
			before.Header.Revision, after.Header.Revision)
	}
}

// TestBeforeTrustStopsWhenTheDatastoreIsWrongAgain: a datastore that goes
// wrong again while BeforeTrust runs cancels it (nothing is written into
// a datastore the node does not trust) and its end is not taken for a
// success; once the datastore is right again, BeforeTrust runs again,
// one at a time.
func TestBeforeTrustStopsWhenTheDatastoreIsWrongAgain(t *testing.T) {
	t.Parallel()
	r := newTrustRig(t)
	ctx := context.Background()
	h := r.holdThenTrust(t)
	if _, err := r.ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := ended(t, h, 20*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("BeforeTrust ended with %v, want it cancelled", err)
	}
	if f, why := r.g.Frozen(); !f || !strings.Contains(why, "marked not ready") || !r.fd.Held() {
		t.Fatalf("after the datastore went wrong again: held %v, frozen %v %q", r.fd.Held(), f, why)
	}
	if _, err := r.ds.SetDatastoreReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	h = r.nextRun(t)
	snaps, _, _ := r.behind.get()
	h.result <- nil
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if s, _, _ := r.behind.get(); s <= snaps {
			return fmt.Sprintf("no fresh snapshot after the second BeforeTrust succeeded (had %d snapshots): %s", snaps, r.behind)
		}
		return ""
	})
	if len(r.started) != 0 {
		t.Fatal("BeforeTrust ran more than once for one trust")
	}
}
