package flowrec

import (
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
)

// TestRepeatedNewCountedOnce drives the collector's handlers directly,
// in order: with the probes (newOnce: events name their entry), a NEW
// of the entry a connection already has (the winner's entry reported
// again for a packet that lost conntrack's clash race) is not another
// connection, while the connection awaits its marks, once open, and
// once opened by its marks before its NEW; a NEW of another entry while
// one is open is a connection (the first's DESTROY was lost); a
// DESTROY of another entry ends an unknown connection and leaves the
// open one. With ctnetlink's events (no ids) a repeated NEW counts, as
// before.
func TestRepeatedNewCountedOnce(t *testing.T) {
	run := func(t *testing.T, newOnce, destroyByID bool, feed func(c *Collector, at time.Time)) []Flow {
		t.Helper()
		var got []Flow
		c, err := New(Config{Node: "n", Group: 1, Index: policy.NewRuleIndex(), Model: podModel{}, Grace: 100 * time.Millisecond,
			newOnce: newOnce, destroyByID: destroyByID, Sinks: []func(Batch){func(b Batch) { got = append(got, b.Flows...) }}})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		c.start = t0
		feed(c, t0)
		c.finalize(t0.Add(time.Second))
		c.flush(t0.Add(time.Second))
		return got
	}
	ev := func(c *Collector, k flowKey, id uint64, pkts uint64, at time.Time) {
		e := ctEvent{key: k, id: id, destroy: pkts > 0, at: at}
		e.counts = counts{pktsOut: pkts, pktsIn: pkts}
		c.onConntrack(&e)
	}
	marks := func(c *Collector, k flowKey, at time.Time) {
		for _, m := range allowMarks(k) {
			m.at = at
			c.onMark(m)
		}
	}
	// sum adds the flows of port's: started, ended and packets out of
	// the traced (allowed by a rule) and the untraced ones.
	type sums struct{ started, ended, pkts, unknownEnded, unknownPkts uint64 }
	sum := func(flows []Flow, port uint16) sums {
		var s sums
		for _, f := range flows {
			if f.DstPort != port {
				continue
			}
			s.started += f.Started
			if f.Egress != nil && f.Egress.Verdict == Allow {
				s.ended += f.Ended
				s.pkts += f.PacketsOut
			} else {
				s.unknownEnded += f.Ended
				s.unknownPkts += f.PacketsOut
			}
		}
		return s
	}

	flows := run(t, true, true, func(c *Collector, at time.Time) {
		// Port 53: repeats of entry 1 while pending and open.
		k := newFlowKey(podA, podB, 17, 40000, 53)
		ev(c, k, 1, 0, at)
		ev(c, k, 1, 0, at)
		marks(c, k, at)
		ev(c, k, 1, 0, at)
		ev(c, k, 1, 1, at)
		// Port 54: entry 3 while entry 2 is open (2's DESTROY lost).
		k = newFlowKey(podA, podB, 17, 40000, 54)
		ev(c, k, 2, 0, at)
		marks(c, k, at)
		ev(c, k, 3, 0, at)
		marks(c, k, at)
		ev(c, k, 3, 3, at)
		// Port 55: a DESTROY of entry 5 while entry 4 is open.
		k = newFlowKey(podA, podB, 17, 40000, 55)
		ev(c, k, 4, 0, at)
		marks(c, k, at)
		ev(c, k, 5, 50, at)
		ev(c, k, 4, 4, at)
		// Port 56: opened by its marks after the grace, then its
		// NEW (entry 6) twice.
		k = newFlowKey(podA, podB, 17, 40000, 56)
		marks(c, k, at)
		c.finalize(at.Add(200 * time.Millisecond))
		ev(c, k, 6, 0, at)
		ev(c, k, 6, 0, at)
		ev(c, k, 6, 6, at)
	})
	for _, tc := range []struct {
		port uint16
		want sums
	}{
		{53, sums{started: 1, ended: 1, pkts: 1}},
		{54, sums{started: 2, ended: 1, pkts: 3}},
		{55, sums{started: 1, ended: 1, pkts: 4, unknownEnded: 1, unknownPkts: 50}},
		{56, sums{started: 1, ended: 1, pkts: 6}},
	} {
		if got := sum(flows, tc.port); got != tc.want {
			t.Errorf("probes, port %d: %+v, want %+v", tc.port, got, tc.want)
		}
	}

	// ctnetlink's events: a NEW after a NEW is another connection.
	flows = run(t, false, false, func(c *Collector, at time.Time) {
		k := newFlowKey(podA, podB, 17, 40000, 53)
		ev(c, k, 0, 0, at)
		ev(c, k, 0, 0, at)
		marks(c, k, at)
	})
	if got := sum(flows, 53); got.started != 2 {
		t.Errorf("events: %+v, want 2 started", got)
	}

	// The poll source (destroyByID, not newOnce): entry 7 open, its
	// tuple taken by entry 8 (7's end unread), then a sweep's DESTROY
	// of 7 with the counters last read: it ends an unknown connection
	// and leaves 8 open, which its own DESTROY ends. A NEW of an id
	// seen before is another connection (ids repeat): here one
	// without marks, so its trace is unknown.
	flows = run(t, false, true, func(c *Collector, at time.Time) {
		k := newFlowKey(podA, podB, 6, 40000, 57)
		ev(c, k, 7, 0, at)
		marks(c, k, at)
		c.finalize(at.Add(200 * time.Millisecond))
		ev(c, k, 8, 0, at)
		marks(c, k, at)
		c.finalize(at.Add(400 * time.Millisecond))
		ev(c, k, 7, 70, at)
		ev(c, k, 8, 8, at)
		k = newFlowKey(podA, podB, 6, 40000, 58)
		ev(c, k, 9, 0, at)
		ev(c, k, 9, 9, at)
		marks(c, k, at)
		c.finalize(at.Add(200 * time.Millisecond))
		ev(c, k, 9, 0, at)
		ev(c, k, 9, 9, at)
	})
	for _, tc := range []struct {
		port uint16
		want sums
	}{
		{57, sums{started: 2, ended: 1, pkts: 8, unknownEnded: 1, unknownPkts: 70}},
		{58, sums{started: 2, ended: 1, pkts: 9, unknownEnded: 1, unknownPkts: 9}},
	} {
		if got := sum(flows, tc.port); got != tc.want {
			t.Errorf("poll, port %d: %+v, want %+v", tc.port, got, tc.want)
		}
	}
}
