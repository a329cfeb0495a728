package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func TestMain(m *testing.M) {
	logrus.SetLevel(logrus.WarnLevel) // claims and releases log at info
	os.Exit(m.Run())
}

// affRecorder is an AffinityHandler that keeps what it heard.
type affRecorder struct {
	mu        sync.Mutex
	snapshots [][]Affinity
	events    []string
}

func (r *affRecorder) OnAffinitySnapshot(all []Affinity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapshots = append(r.snapshots, all)
}

func (r *affRecorder) OnAffinityUpdate(a Affinity, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if deleted {
		r.events = append(r.events, fmt.Sprintf("%s %s deleted", a.Node, a.CIDR))
		return
	}
	r.events = append(r.events, fmt.Sprintf("%s %s %s", a.Node, a.CIDR, a.State))
}

func (r *affRecorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		ok := cond()
		r.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("timed out waiting for %s; snapshots %v events %v", what, r.snapshots, r.events)
}

func TestWatchAffinities(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.13.0.0/24", 26)
	c := New(e.ds, WithEmptyBlockGrace(0))
	first := assign(t, c, "n0", "before-watch")
	firstBlock := netip.PrefixFrom(first, 26).Masked()

	ctx, cancel := context.WithCancel(context.Background())
	rec := &affRecorder{}
	done := make(chan error, 1)
	go func() { done <- WatchAffinities(ctx, e.ds, rec) }()
	rec.waitFor(t, "snapshot", func() bool { return len(rec.snapshots) == 1 })
	if s := rec.snapshots[0]; len(s) != 1 || s[0] != (Affinity{Node: "n0", CIDR: firstBlock, State: StateConfirmed}) {
		t.Fatalf("snapshot %v", s)
	}

	ip := assign(t, c, "n1", "h1")
	block := netip.PrefixFrom(ip, 26).Masked()
	want := []string{
		fmt.Sprintf("n1 %s pending", block),
		fmt.Sprintf("n1 %s confirmed", block),
	}
	rec.waitFor(t, "claim events", func() bool { return len(rec.events) >= 2 })
	if fmt.Sprint(rec.events) != fmt.Sprint(want) {
		t.Fatalf("claim events %v, want %v", rec.events, want)
	}
	if _, err := c.ReleaseByHandle(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseEmptyBlocks(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprintf("n1 %s pendingDeletion", block), fmt.Sprintf("n1 %s deleted", block))
	rec.waitFor(t, "release events", func() bool { return len(rec.events) >= 4 })
	if fmt.Sprint(rec.events) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", rec.events, want)
	}
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("WatchAffinities returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchAffinities did not return after cancel")
	}
}
