// Package heartbeat lets a long-running loop show it still goes round,
// so liveness can tell a stalled loop from an idle one.
package heartbeat

import (
	"sync/atomic"
	"time"
)

// Interval is how often a loop must go round even with nothing to do.
const Interval = 5 * time.Second

// Beat records when a loop last went round. The zero value has never
// beaten; a nil *Beat ignores Mark, so loops can take one optionally.
type Beat struct {
	last atomic.Int64 // unix nanoseconds
}

// Mark records that the loop went round now.
func (b *Beat) Mark() {
	if b != nil {
		b.last.Store(time.Now().UnixNano())
	}
}

// Age is how long ago the loop last went round, and false if it never
// has.
func (b *Beat) Age(now time.Time) (time.Duration, bool) {
	n := b.last.Load()
	if n == 0 {
		return 0, false
	}
	return now.Sub(time.Unix(0, n)), true
}
