package flowrec

import (
	"fmt"
	"testing"
	"time"
)

// TestRepeatedNewCountedOnce: with the probes (newOnce: events name
// their entry), a NEW of the entry a connection already has (the
// winner's entry reported again for a packet that lost conntrack's
// clash race) is not another connection, while the connection awaits
// its marks or once open; a NEW of another entry is (after the first
// one's DESTROY, or when that DESTROY was lost), and a DESTROY of
// another entry does not end the open connection. With ctnetlink's
// events (no ids) a repeated NEW is counted as a connection, as
// before.
func TestRepeatedNewCountedOnce(t *testing.T) {
	const n = 200
	ev := func(k flowKey, id uint64, destroy bool) ctEvent {
		e := ctEvent{key: k, id: id, destroy: destroy, at: time.Now()}
		if destroy {
			e.counts = counts{pktsOut: 1, bytesOut: 60, pktsIn: 1, bytesIn: 60}
		}
		return e
	}
	feed := func(marks chan<- mark, cts chan<- ctEvent) {
		for i := range n {
			k := newFlowKey(podA, podB, 17, uint16(40000+i), 53)
			id := uint64(i) << 8
			// Repeated while it awaits its marks, then open.
			cts <- ev(k, id+1, false)
			cts <- ev(k, id+1, false)
			for _, m := range allowMarks(k) {
				marks <- m
			}
			cts <- ev(k, id+1, false)
			cts <- ev(k, id+1, true)
			// After its DESTROY another entry on the tuple is a
			// connection.
			cts <- ev(k, id+2, false)
			// Another entry while it is open (its DESTROY was
			// lost): a connection too.
			cts <- ev(k, id+3, false)
			cts <- ev(k, id+3, true)
		}
	}
	for _, tc := range []struct {
		newOnce bool
		started uint64
	}{{true, 3 * n}, {false, 5 * n}} {
		t.Run(fmt.Sprintf("newOnce=%v", tc.newOnce), func(t *testing.T) {
			cfg := Config{Interval: 200 * time.Millisecond, Grace: 100 * time.Millisecond, newOnce: tc.newOnce}
			batches := runLoop(t, cfg, feed, func(c tally) bool { return c.started >= tc.started && c.ended >= 2*n })
			got := tallyOf(batches)
			if got.started != tc.started || got.ended != 2*n {
				t.Errorf("started %d, ended %d; want %d and %d (dropped %v)", got.started, got.ended, tc.started, 2*n, got.dropped)
			}
		})
	}

	// A DESTROY of another entry than the open connection's ends an
	// unknown connection and leaves the open one to its own.
	t.Run("destroy of another entry", func(t *testing.T) {
		cfg := Config{Interval: 200 * time.Millisecond, Grace: 100 * time.Millisecond, newOnce: true}
		batches := runLoop(t, cfg, func(marks chan<- mark, cts chan<- ctEvent) {
			for i := range n {
				k := newFlowKey(podA, podB, 17, uint16(40000+i), 53)
				cts <- ev(k, 1, false)
				for _, m := range allowMarks(k) {
					marks <- m
				}
				cts <- ev(k, 2, true)
				cts <- ev(k, 1, true)
			}
		}, func(c tally) bool { return c.ended >= 2*n })
		got := tallyOf(batches)
		if got.started != n || got.ended != 2*n {
			t.Errorf("started %d, ended %d; want %d and %d", got.started, got.ended, n, 2*n)
		}
	})
}
