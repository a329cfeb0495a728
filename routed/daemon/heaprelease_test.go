package daemon

import (
	"context"
	"runtime/debug"
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
	var restored atomic.Int64
	asked := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- releaseStartHeap(ctx, func() bool { asked <- struct{}{}; return synced.Load() }, func() { restored.Add(1) }, logrus.NewEntry(logger))
	}()
	<-asked
	<-asked // asked twice, not in sync: nothing released yet
	if n := len(hook.AllEntries()); n != 0 {
		t.Fatalf("released before the node was in sync: %d log entries", n)
	}
	if n := restored.Load(); n != 0 {
		t.Fatalf("the steady GOGC was put back %d times before the node was in sync", n)
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
	if n := restored.Load(); n != 1 {
		t.Fatalf("the steady GOGC was put back %d times, want once at the release", n)
	}
}

// TestLowerGCForStart: without GOGC in the environment the collector
// runs at startGCPercent until restore puts the previous percent back
// (once, however often restore is called); with GOGC set nothing
// changes.
func TestLowerGCForStart(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(73)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	restore := lowerGCForStart()
	if got := debug.SetGCPercent(startGCPercent); got != startGCPercent {
		t.Fatalf("GOGC during start-up %d, want %d", got, startGCPercent)
	}
	restore()
	if got := debug.SetGCPercent(42); got != 73 {
		t.Fatalf("GOGC after restore %d, want the previous 73", got)
	}
	restore() // a second call must not put 73 back over 42
	if got := debug.SetGCPercent(73); got != 42 {
		t.Fatalf("a second restore changed GOGC to %d, want 42 left alone", got)
	}

	t.Setenv("GOGC", "80")
	restore = lowerGCForStart()
	if got := debug.SetGCPercent(73); got != 73 {
		t.Fatalf("with GOGC set in the environment the percent became %d, want 73 left alone", got)
	}
	restore()
	if got := debug.SetGCPercent(73); got != 73 {
		t.Fatalf("restore with GOGC set changed the percent to %d", got)
	}
}

// TestStartGCLimit: a node not in sync within startGCLimit gets the
// steady GOGC back then, and the heap is still returned once it is in
// sync.
func TestStartGCLimit(t *testing.T) {
	prev := startGCLimit
	startGCLimit = 50 * time.Millisecond
	t.Cleanup(func() { startGCLimit = prev })
	logger, hook := test.NewNullLogger()
	var synced atomic.Bool
	var restored atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- releaseStartHeap(ctx, synced.Load, func() { restored.Add(1) }, logrus.NewEntry(logger))
	}()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() string {
		if restored.Load() == 0 {
			return "the steady GOGC is not back after the limit"
		}
		return ""
	})
	if e := hook.LastEntry(); e == nil || e.Data["after"] == nil {
		t.Fatalf("no log line says the steady GOGC is back: %v", hook.AllEntries())
	}
	synced.Store(true)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		if e := hook.LastEntry(); e.Message != "in sync: returned the start-up heap to the kernel" {
			return "no release since the node was in sync: " + e.Message
		}
		return ""
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := restored.Load(); n != 1 {
		t.Fatalf("the steady GOGC was put back %d times, want once", n)
	}
}
