package testenv

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestPollSucceeds(t *testing.T) {
	n := 0
	err := Poll(context.Background(), 5*time.Second, time.Millisecond, func() (bool, string, error) {
		n++
		return n == 3, fmt.Sprintf("poll %d", n), nil
	})
	if err != nil || n != 3 {
		t.Fatalf("Poll = %v after %d checks, want nil after 3", err, n)
	}
}

func TestPollTimeoutSaysLastSeen(t *testing.T) {
	n := 0
	start := time.Now()
	err := Poll(context.Background(), 100*time.Millisecond, 30*time.Millisecond, func() (bool, string, error) {
		n++
		return false, fmt.Sprintf("poll %d", n), nil
	})
	took := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Poll = %v, want ErrTimeout", err)
	}
	if want := fmt.Sprintf("after 100ms: poll %d", n); !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Poll = %q, want it to end with %q (the last check's message)", err, want)
	}
	if took < 100*time.Millisecond || took > 10*time.Second {
		t.Errorf("gave up after %v, want 100ms and not much more", took)
	}
}

// An interval longer than the timeout still gets a last check at the
// deadline rather than giving up after one.
func TestPollChecksAtDeadline(t *testing.T) {
	n := 0
	start := time.Now()
	err := Poll(context.Background(), 100*time.Millisecond, time.Hour, func() (bool, string, error) {
		n++
		return false, "no", nil
	})
	if !errors.Is(err, ErrTimeout) || n != 2 {
		t.Fatalf("Poll = %v after %d checks, want ErrTimeout after 2 (start and deadline)", err, n)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 10*time.Second {
		t.Errorf("gave up after %v, want 100ms", took)
	}
}

func TestPollStopsOnError(t *testing.T) {
	exited := errors.New("proc exited")
	n := 0
	err := Poll(context.Background(), time.Minute, time.Millisecond, func() (bool, string, error) {
		n++
		if n == 2 {
			return false, "", fmt.Errorf("etcd: %w", exited)
		}
		return false, "not yet", nil
	})
	if !errors.Is(err, exited) || n != 2 {
		t.Fatalf("Poll = %v after %d checks, want the check's error after 2", err, n)
	}
}

func TestPollStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	start := time.Now()
	err := Poll(ctx, time.Minute, 20*time.Millisecond, func() (bool, string, error) {
		n++
		if n == 3 {
			cancel()
		}
		return false, fmt.Sprintf("poll %d", n), nil
	})
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("Poll = %v, want context.Canceled", err)
	}
	if n != 3 || !strings.HasSuffix(err.Error(), ": poll 3") {
		t.Errorf("Poll = %q after %d checks, want it to stop after 3 and name poll 3", err, n)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v to see the cancel", took)
	}

	// Cancelled while waiting between checks.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start = time.Now()
	err = Poll(ctx, time.Minute, time.Hour, func() (bool, string, error) { return false, "waiting", nil })
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasSuffix(err.Error(), ": waiting") {
		t.Fatalf("Poll = %v, want context.DeadlineExceeded naming the last check", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("took %v to see ctx end during an interval of an hour", took)
	}
}
