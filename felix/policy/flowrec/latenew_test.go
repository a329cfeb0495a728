package flowrec

import (
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
)

// TestLateNewIsNotAnotherConnection: the marks of a connection and
// conntrack's NEW come from two sockets read apart, so the grace can end
// (the connection decided by its marks and open) before the NEW is read.
// That NEW is the open connection's own: one started, one ended. A NEW
// after the connection's DESTROY is a new connection on the tuple.
// (TestFloodCountedNotStored once counted 100,001 started for 100,000
// connections on a loaded machine, where the events' goroutine lagged
// the marks by more than the grace.)
func TestLateNewIsNotAnotherConnection(t *testing.T) {
	var batches []Batch
	grace := 50 * time.Millisecond
	c, err := New(Config{Node: "n", Group: 1, Index: policy.NewRuleIndex(), Model: podModel{}, Grace: grace, Interval: time.Second,
		Sinks: []func(Batch){func(b Batch) { batches = append(batches, b) }}})
	if err != nil {
		t.Fatal(err)
	}
	k := newFlowKey(podA, podB, 6, 40000, 80)
	t0 := time.Now()
	for _, m := range allowMarks(k) {
		c.onMark(m)
	}
	c.finalize(t0.Add(grace + time.Millisecond)) // decided by its marks, open
	if cur := c.conns[k]; cur.cls == nil || cur.ct {
		t.Fatalf("after the grace: %+v, want open without its NEW", cur)
	}
	c.onConntrack(&ctEvent{key: k, at: t0.Add(grace + 2*time.Millisecond)})
	c.onConntrack(&ctEvent{key: k, destroy: true, counts: counts{pktsOut: 3, bytesOut: 180}, at: t0.Add(grace + 3*time.Millisecond)})
	// The tuple again, after its DESTROY: a second connection, decided
	// at once (its NEW and both marks in).
	c.onConntrack(&ctEvent{key: k, at: t0.Add(grace + 4*time.Millisecond)})
	for _, m := range allowMarks(k) {
		c.onMark(m)
	}
	c.onConntrack(&ctEvent{key: k, destroy: true, counts: counts{pktsOut: 3, bytesOut: 180}, at: t0.Add(grace + 5*time.Millisecond)})
	c.flush(t0.Add(2 * time.Second))
	var started, ended, bytesOut uint64
	for _, b := range batches {
		for _, f := range b.Flows {
			started += f.Started
			ended += f.Ended
			bytesOut += f.BytesOut
		}
	}
	if started != 2 || ended != 2 || bytesOut != 360 {
		t.Fatalf("two connections (the first's NEW read after its marks' grace): started %d, ended %d, bytes out %d; batches %+v", started, ended, bytesOut, batches)
	}
	if len(c.conns) != 0 {
		t.Fatalf("%d entries left after both ended", len(c.conns))
	}
}
