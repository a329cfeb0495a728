package identity

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
)

// TestBeforeTrustRunsWhileHeld: a node that held the datastore runs
// BeforeTrust before it follows it again, still frozen while it runs;
// while it fails the node keeps holding and says why, and it is not
// tried again at once.
func TestBeforeTrustRunsWhileHeld(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	g := New(ds, t.TempDir())
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	calls, fail := 0, errors.New("address 10.0.0.5 held by another pod")
	var result error
	g.BeforeTrust(func(context.Context) error {
		calls++
		if f, _ := g.Frozen(); !f {
			t.Error("BeforeTrust ran while the node already followed the datastore")
		}
		return result
	})
	check := func() {
		t.Helper()
		if err := g.Check(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check()
	if calls != 0 {
		t.Fatalf("BeforeTrust ran %d times on a node that never held", calls)
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
	if f, why := g.Frozen(); !f || calls != 0 {
		t.Fatalf("a rolled-back datastore that caught up: frozen %v %q, %d BeforeTrust calls", f, why, calls)
	}
	// Accepted, but the pods cannot be put back.
	if _, err := ds.ReinitClusterInfo(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	result = fail
	check()
	if f, why := g.Frozen(); !f || !strings.Contains(why, fail.Error()) {
		t.Fatalf("after a failed BeforeTrust: frozen %v %q", f, why)
	}
	check() // within trustRetry: not run again
	if calls != 1 {
		t.Fatalf("BeforeTrust ran %d times, want 1 within %v", calls, trustRetry)
	}
	result = nil
	g.mu.Lock()
	g.lastTry = g.lastTry.Add(-trustRetry)
	g.mu.Unlock()
	check()
	if f, why := g.Frozen(); f || calls != 2 {
		t.Fatalf("after BeforeTrust succeeded: frozen %v %q, %d calls", f, why, calls)
	}
}
