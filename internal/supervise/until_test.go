package supervise

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestUntil: true once cond holds, after asking again; false when the
// context ends first; true at once for a nil cond.
func TestUntil(t *testing.T) {
	var asked atomic.Int32
	if !Until(context.Background(), time.Millisecond, func() bool { return asked.Add(1) == 3 }) {
		t.Fatal("Until returned false with a live context")
	}
	if n := asked.Load(); n != 3 {
		t.Fatalf("cond asked %d times, want 3 (true on the third)", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Until(ctx, time.Millisecond, func() bool { return false }) {
		t.Fatal("Until returned true for a cond that never held")
	}
	if !Until(ctx, time.Hour, nil) {
		t.Fatal("a nil cond is not true at once")
	}
}
