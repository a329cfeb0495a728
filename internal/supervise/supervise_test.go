package supervise

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
)

func TestFatalPartStopsTheOthers(t *testing.T) {
	g := New(context.Background(), logrus.NewEntry(logrus.New()))
	stopped := make(chan struct{})
	g.Go("waiter", Fatal, func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil })
	g.Go("broken", Fatal, func(context.Context) error { return errors.New("no socket") })
	err := g.Wait(5 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "broken: no socket") {
		t.Fatalf("Wait = %v, want the broken part's error", err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("the other part was not stopped")
	}
}

func TestRestartPartRunsAgain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	g := New(ctx, logrus.NewEntry(logrus.New()))
	var runs atomic.Int32
	g.Go("flaky", Restart, func(ctx context.Context) error {
		if runs.Add(1) < 2 {
			return errors.New("transient")
		}
		cancel()
		<-ctx.Done()
		return nil
	})
	if err := g.Wait(5 * time.Second); err != nil {
		t.Fatalf("Wait = %v, want nil after a cancelled context", err)
	}
	if runs.Load() != 2 {
		t.Fatalf("ran %d times, want 2", runs.Load())
	}
}
