// Package backoff is the one retry pacing every routed loop uses: a
// delay that doubles from a floor to a ceiling, reset by success.
package backoff

import (
	"context"
	"time"
)

// Backoff paces retries. Not safe for concurrent use: each loop owns one.
type Backoff struct {
	min, max, next time.Duration
}

// New returns a Backoff waiting min first, doubling up to max.
func New(min, max time.Duration) *Backoff {
	return &Backoff{min: min, max: max, next: min}
}

// Next returns the delay to wait now and doubles the following one.
func (b *Backoff) Next() time.Duration {
	d := b.next
	b.next = min(b.next*2, b.max)
	return d
}

// Reset starts again from the floor (after a success).
func (b *Backoff) Reset() { b.next = b.min }

// Wait sleeps for Next, or less if ctx ends first; it reports whether
// ctx is still alive.
func (b *Backoff) Wait(ctx context.Context) bool {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Retry runs f until it returns nil, waiting between failures, while
// ctx lasts; retryable decides which errors are worth another try
// (nil: all). It returns f's last error or ctx's.
func Retry(ctx context.Context, min, max time.Duration, retryable func(error) bool, f func() error) error {
	b := New(min, max)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if retryable != nil && !retryable(err) {
			return err
		}
		if !b.Wait(ctx) {
			return ctx.Err()
		}
	}
}
