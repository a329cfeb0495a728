package feed_test

import (
	"context"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// handOver hands each batch to a loop over an unbuffered channel, as
// felix's consumer does: OnBatch alone would wait for a loop that may
// never come back.
type handOver struct{ ch chan feed.Batch }

func (c handOver) OnBatch(b feed.Batch) { c.ch <- b }

func (c handOver) OnBatchContext(ctx context.Context, b feed.Batch) {
	select {
	case c.ch <- b:
	case <-ctx.Done():
	}
}

// TestRunReturnsWithConsumerWaiting: the consumer's loop stopped first
// (felix's Run sees the daemon's shutdown before the feed does) and a
// change is waiting for it in OnBatchContext; Run still returns at once
// when its context ends (it used to wait for the delivery goroutine
// forever, and the daemon's shutdown for its whole timeout).
func TestRunReturnsWithConsumerWaiting(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	c := handOver{ch: make(chan feed.Batch)}
	fd := feed.New(ds, feed.Options{})
	fd.Subscribe("handover", []api.Kind{api.KindIPPool}, c)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	snapshot := make(chan struct{})
	go func() {
		defer close(loopDone)
		for {
			select {
			case <-loopCtx.Done():
				return
			case b := <-c.ch:
				if b.Snapshot {
					close(snapshot)
				}
			}
		}
	}()
	done := make(chan error, 1)
	go func() { done <- fd.Run(ctx) }()
	select {
	case <-snapshot:
	case <-time.After(20 * time.Second):
		t.Fatal("no snapshot in 20 s")
	}
	stopLoop()
	<-loopDone
	pool(t, ds, "waiting", "10.9.0.0/24", 28)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if name, _ := fd.Stalled(time.Now(), 0); name != "handover" {
			return "the change is not waiting in the consumer's OnBatch"
		}
		return ""
	})
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return 5 s after its context ended: its delivery goroutine waits in OnBatch")
	}
}
