package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestNextDoublesToMaxAndResets(t *testing.T) {
	b := New(10*time.Millisecond, 35*time.Millisecond)
	want := []time.Duration{10, 20, 35, 35}
	for i, w := range want {
		if got := b.Next(); got != w*time.Millisecond {
			t.Fatalf("step %d: %v, want %v", i, got, w*time.Millisecond)
		}
	}
	b.Reset()
	if got := b.Next(); got != 10*time.Millisecond {
		t.Fatalf("after Reset: %v", got)
	}
}

func TestRetry(t *testing.T) {
	ctx := context.Background()
	n := 0
	err := Retry(ctx, time.Millisecond, time.Millisecond, nil, func() error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Retry = %v after %d calls, want nil after 3", err, n)
	}
	fatal := errors.New("fatal")
	n = 0
	err = Retry(ctx, time.Millisecond, time.Millisecond, func(e error) bool { return !errors.Is(e, fatal) }, func() error { n++; return fatal })
	if !errors.Is(err, fatal) || n != 1 {
		t.Fatalf("Retry with a non-retryable error = %v after %d calls", err, n)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := Retry(cctx, time.Hour, time.Hour, nil, func() error { return errors.New("x") }); !errors.Is(err, context.Canceled) {
		t.Fatalf("Retry on a cancelled context = %v", err)
	}
}
