package ipam

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// borrowRecorder keeps what WatchBorrowed reported, as felix would.
type borrowRecorder struct {
	mu    sync.Mutex
	state map[netip.Prefix]map[netip.Addr]string
	calls int
}

func (r *borrowRecorder) OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state, r.calls = all, r.calls+1
}

func (r *borrowRecorder) OnBorrowedBlock(b netip.Prefix, br map[netip.Addr]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(br) == 0 {
		delete(r.state, b)
	} else {
		r.state[b] = br
	}
	r.calls++
}

// waitFor polls until the recorded borrowed addresses read want.
func (r *borrowRecorder) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got string
	for time.Now().Before(deadline) {
		r.mu.Lock()
		got = fmt.Sprint(r.state)
		r.mu.Unlock()
		if got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("borrowed addresses %s, want %s", got, want)
}

func TestWatchBorrowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("one-block", "10.6.0.0/28", 28)
	c := New(e.ds)
	assign(t, c, "n1", "n1-pod")
	borrowed := assign(t, c, "n2", "n2-pod") // from n1's block
	rec := &borrowRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- WatchBorrowed(ctx, e.ds, rec) }()
	t.Cleanup(func() { cancel(); <-done })

	rec.waitFor(t, fmt.Sprintf("map[10.6.0.0/28:map[%s:n2]]", borrowed))
	// A second borrowed address arrives as an event.
	second := assign(t, c, "n3", "n3-pod")
	rec.waitFor(t, fmt.Sprintf("map[10.6.0.0/28:map[%s:n2 %s:n3]]", borrowed, second))
	// An allocation of the block's own node changes no borrowed address.
	rec.mu.Lock()
	before := rec.calls
	rec.mu.Unlock()
	assign(t, c, "n1", "n1-pod2")
	if _, err := c.ReleaseByHandle(ctxT(t), "n3-pod"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, fmt.Sprintf("map[10.6.0.0/28:map[%s:n2]]", borrowed))
	rec.mu.Lock()
	if rec.calls != before+1 {
		t.Errorf("%d reports for one borrowed change and one unrelated write, want 1", rec.calls-before)
	}
	rec.mu.Unlock()
	if _, err := c.ReleaseByHandle(ctxT(t), "n2-pod"); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "map[]")
}
