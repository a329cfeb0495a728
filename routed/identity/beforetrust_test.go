package identity

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
)

// TestBeforeTrustRunsWhileHeld: a node that held the datastore runs
// BeforeTrust before it follows it again, on its own goroutine and still
// frozen while it runs, saying what it does; while it fails the node
// keeps holding and says why, it is not tried again within the retry
// delay, and the guard asks for a new judgement once it may be.
func TestBeforeTrustRunsWhileHeld(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	g := New(ds, t.TempDir())
	g.trust.retry = time.Second
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	type call struct {
		result chan error // the hook returns what the test sends
	}
	calls := make(chan call, 4)
	rejudged := make(chan time.Time, 4)
	g.BeforeTrust(func(ctx context.Context, doing func(string)) error {
		if f, why := g.Frozen(); !f {
			t.Error("BeforeTrust ran while the node already followed the datastore")
		} else if !strings.Contains(why, "putting back the pods") {
			t.Errorf("while BeforeTrust runs, the reason is %q", why)
		}
		doing("putting back 3 of its 7 pods")
		c := call{result: make(chan error)}
		calls <- c
		select {
		case err := <-c.result:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}, func() { rejudged <- time.Now() })
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { _ = g.Run(runCtx); close(ran) }()
	t.Cleanup(func() { stop(); <-ran })
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.trust.ctx == nil {
			return "Run did not start: the guard has no trust context yet"
		}
		return ""
	})

	check := func() {
		t.Helper()
		if err := g.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	nextCall := func() call { t.Helper(); return receive(t, calls, "BeforeTrust did not run") }
	nextRejudge := func() time.Time { t.Helper(); return receive(t, rejudged, "the guard did not ask for a new judgement") }
	check()
	if len(calls) != 0 {
		t.Fatal("BeforeTrust ran on a node that never held")
	}
	// Back in time, as after a restore: hold.
	g.mu.Lock()
	g.maxRev += 1000
	g.mu.Unlock()
	check()
	if f, why := g.Frozen(); !f || !strings.Contains(why, "went back in time") {
		t.Fatalf("frozen %v %q", f, why)
	}
	// The datastore catching up is not enough: a rolled-back datastore
	// is followed again only once the operator accepts it.
	g.mu.Lock()
	g.maxRev -= 1000
	g.mu.Unlock()
	check()
	if f, why := g.Frozen(); !f || len(calls) != 0 {
		t.Fatalf("a rolled-back datastore that caught up: frozen %v %q, BeforeTrust ran", f, why)
	}
	// Accepted: Admit starts BeforeTrust and holds while it runs.
	if _, err := ds.ReinitClusterInfo(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	check()
	c := nextCall()
	if f, why := g.Frozen(); !f || !strings.Contains(why, "putting back 3 of its 7 pods") {
		t.Fatalf("while BeforeTrust runs: frozen %v %q", f, why)
	}
	check() // one at a time
	// The pods cannot be put back.
	fail := errors.New("address 10.0.0.5 held by another pod")
	c.result <- fail
	failedAt := nextRejudge()
	if f, why := g.Frozen(); !f || !strings.Contains(why, fail.Error()) {
		t.Fatalf("after a failed BeforeTrust: frozen %v %q", f, why)
	}
	if d := failedAt.Sub(g.trustFailedAt()); d < g.trust.retry {
		t.Fatalf("asked for a new judgement %v after the failure, before the retry delay %v", d, g.trust.retry)
	}
	// A judgement within the delay does not run it again.
	g.mu.Lock()
	g.trust.lastTry = time.Now()
	g.mu.Unlock()
	check()
	if len(calls) != 0 {
		t.Fatalf("BeforeTrust ran again within %v", g.trust.retry)
	}
	g.mu.Lock()
	g.trust.lastTry = time.Now().Add(-g.trust.retry)
	g.mu.Unlock()
	check()
	nextCall().result <- nil
	nextRejudge()
	check()
	if f, why := g.Frozen(); f {
		t.Fatalf("after BeforeTrust succeeded: frozen %q", why)
	}
}

func (g *Guard) trustFailedAt() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.trust.lastTry
}

// receive waits for a value on ch, failing with what after 20 s.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal(what)
		var zero T
		return zero
	}
}

// Failing attempts space out: each lists every endpoint of the cluster.
func TestTrustDelayDoubles(t *testing.T) {
	tr := trust{retry: 5 * time.Second}
	var got []time.Duration
	for range 8 {
		tr.failures++
		got = append(got, tr.delay())
	}
	want := []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 2 * time.Minute, 2 * time.Minute, 2 * time.Minute}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("delays %v, want %v", got, want)
	}
	tr.failures = 0
	if d := tr.delay(); d != 5*time.Second {
		t.Fatalf("delay after a success %v, want 5s", d)
	}
}
