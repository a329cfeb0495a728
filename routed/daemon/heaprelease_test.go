package daemon

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/internal/testenv"
)

// TestReleaseStartHeapWaitsForSync: the heap is returned once, only
// after the node is in sync, and the part then waits for its context.
func TestReleaseStartHeapWaitsForSync(t *testing.T) {
	logger, hook := test.NewNullLogger()
	var synced atomic.Bool
	asked := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- releaseStartHeap(ctx, func() bool { asked <- struct{}{}; return synced.Load() }, logrus.NewEntry(logger))
	}()
	<-asked
	<-asked // asked twice, not in sync: nothing released yet
	if n := len(hook.AllEntries()); n != 0 {
		t.Fatalf("released before the node was in sync: %d log entries", n)
	}
	synced.Store(true)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if len(hook.AllEntries()) == 0 {
			return "no release since the node was in sync"
		}
		return ""
	})
	if e := hook.LastEntry(); e.Message != "in sync: returned the start-up heap to the kernel" || e.Data["heldAfter"] == nil {
		t.Fatalf("log: %q %v", e.Message, e.Data)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("did not return after its context ended")
	}
	if n := len(hook.AllEntries()); n != 1 {
		t.Fatalf("%d log entries, want one release", n)
	}
}
