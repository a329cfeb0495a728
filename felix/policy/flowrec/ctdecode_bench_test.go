package flowrec

import (
	"github.com/routed-net/routed/felix/policy"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkAppendCtEvents decodes a NEW and a DESTROY message (the
// events of one connection) into a reused slice.
func BenchmarkAppendCtEvents(b *testing.B) {
	msgs := [][]byte{ctMessage(ctMsgNew, unix.NLM_F_CREATE|unix.NLM_F_EXCL), ctMessage(ctMsgDelete, 0)}
	evs := make([]ctEvent, 0, 2)
	at := time.Now()
	for b.Loop() {
		evs = evs[:0]
		for _, m := range msgs {
			evs = appendCtEvents(evs, m, at)
		}
	}
	if len(evs) != 2 {
		b.Fatalf("%d events", len(evs))
	}
}

// BenchmarkCollectorEvents is the collector's own work per connection
// without the kernel: 30,000 connections of one pod to another's port
// (as BenchmarkCollectorCPU's), each a NEW, decided at the end of its
// grace without marks, then a DESTROY with counters, in batches of 256
// as the reader hands them over (on a clock of 9,000 connections a
// second: about 3,600 connections wait out their grace at a time).
func BenchmarkCollectorEvents(b *testing.B) {
	const conns, batch = 30_000, 256
	c, err := New(Config{Node: "n", Group: 1, Index: policy.NewRuleIndex(), Model: versionedPodModel{}, MaxOpen: conns})
	if err != nil {
		b.Fatal(err)
	}
	c.start = time.Now()
	evs := make([]ctEvent, 0, batch)
	now := time.Now()
	feed := func(destroy bool) {
		for i := 0; i < conns; i += batch {
			evs = evs[:0]
			for j := i; j < min(conns, i+batch); j++ {
				k := newFlowKey(podA, podB, 6, uint16(1024+j%60000), 80)
				evs = append(evs, ctEvent{key: k, destroy: destroy, at: now, counts: counts{pktsOut: 5, bytesOut: 300, pktsIn: 4, bytesIn: 250}})
			}
			for k := range evs {
				c.onConntrack(&evs[k])
			}
			// 256 connections' events come in 28 ms at 9,000 a second.
			now = now.Add(28 * time.Millisecond)
			c.finalize(now)
		}
		now = now.Add(c.cfg.Grace)
		c.finalize(now)
	}
	for b.Loop() {
		feed(false)
		feed(true)
		c.flush(now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*conns), "ns/conn")
}
