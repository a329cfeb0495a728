package flowrec

import (
	"fmt"
	"testing"
	"time"
)

// TestRepeatedNewCountedOnce: with the probes (newOnce), a NEW on a
// connection whose entry is still open (the winner's entry reported
// again for a packet that lost conntrack's clash race) is not another
// connection, while it awaits its marks or once open; a NEW after the
// entry's DESTROY is. With ctnetlink's events the repeated NEW is
// counted as a connection, as before (their NEW comes once an entry,
// so a repeat means a DESTROY was lost).
func TestRepeatedNewCountedOnce(t *testing.T) {
	const n = 200
	destroy := func(k flowKey) ctEvent {
		return ctEvent{key: k, destroy: true, counts: counts{pktsOut: 1, bytesOut: 60, pktsIn: 1, bytesIn: 60}, at: time.Now()}
	}
	feed := func(marks chan<- mark, cts chan<- ctEvent) {
		for i := range n {
			// Repeated while it awaits its marks, then open.
			k := newFlowKey(podA, podB, 17, uint16(40000+i), 53)
			cts <- ctEvent{key: k, at: time.Now()}
			cts <- ctEvent{key: k, at: time.Now()}
			for _, m := range allowMarks(k) {
				marks <- m
			}
			cts <- ctEvent{key: k, at: time.Now()}
			cts <- destroy(k)
			// After its DESTROY the tuple's next NEW is a
			// connection.
			cts <- ctEvent{key: k, at: time.Now()}
			cts <- destroy(k)
		}
	}
	for _, tc := range []struct {
		newOnce bool
		started uint64
	}{{true, 2 * n}, {false, 4 * n}} {
		t.Run(fmt.Sprintf("newOnce=%v", tc.newOnce), func(t *testing.T) {
			cfg := Config{Interval: 200 * time.Millisecond, Grace: 100 * time.Millisecond, newOnce: tc.newOnce}
			batches := runLoop(t, cfg, feed, func(c tally) bool { return c.started >= tc.started && c.ended >= 2*n })
			got := tallyOf(batches)
			if got.started != tc.started || got.ended != 2*n {
				t.Errorf("started %d, ended %d; want %d and %d (dropped %v)", got.started, got.ended, tc.started, 2*n, got.dropped)
			}
		})
	}
}
