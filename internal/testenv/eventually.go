package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// ErrTimeout is wrapped by Poll's error when timeout passed before check
// was done.
var ErrTimeout = errors.New("testenv: timed out")

// Poll calls check every interval until it reports done, returns an
// error, ctx ends, or timeout passes; check runs once more at the
// deadline, so a wait never gives up between two polls. last is what
// check saw this time (an answer, an error's text, a count); it ends the
// error of a timeout or of ctx ending, so a failure says what was seen,
// and the caller wraps it with what was awaited. An error from check is
// fatal (a process that exited) and is returned as it is, at once.
//
// Poll is for helper code that has no testing.TB and returns errors (the
// labs of tests/lab and tests/k8s, also run by binaries); a test uses
// Eventually.
func Poll(ctx context.Context, timeout, interval time.Duration, check func() (done bool, last string, err error)) error {
	start := time.Now()
	deadline := start.Add(timeout)
	cancelled := func(last string) error {
		return fmt.Errorf("%w after %v of %v: %s", ctx.Err(), time.Since(start).Round(time.Millisecond), timeout, last)
	}
	for {
		done, last, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if ctx.Err() != nil {
			return cancelled(last)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w after %v: %s", ErrTimeout, timeout, last)
		}
		t := time.NewTimer(min(interval, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return cancelled(last)
		case <-t.C:
		}
	}
}

// Eventually polls cond every interval until it returns "" or timeout
// passes, then fails with cond's last message.
func Eventually(t testing.TB, timeout, interval time.Duration, cond func() string) {
	t.Helper()
	err := Poll(context.Background(), timeout, interval, func() (bool, string, error) {
		msg := cond()
		return msg == "", msg, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
