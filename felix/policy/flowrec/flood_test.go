package flowrec

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ti-mo/conntrack"

	"github.com/routed-net/routed/felix/policy"
)

// podModel names 10.0.0.1 and 10.0.0.2 as local pods, anything else
// as a plain address.
type podModel struct{}

func (podModel) Describe(f policy.Flow) (src, dst End, staged []policy.StagedVerdict) {
	end := func(a netip.Addr) End {
		if a == netip.MustParseAddr("10.0.0.1") || a == netip.MustParseAddr("10.0.0.2") {
			return End{Addr: a.String(), Kind: EndPod, Namespace: "ns", Name: a.String(), Local: true}
		}
		return End{Addr: a.String(), Kind: EndNet}
	}
	return end(f.Src), end(f.Dst), nil
}

// runLoop runs a collector's loop on synthetic events and returns its
// batches once the events are in and one more interval passed.
func runLoop(t *testing.T, cfg Config, feed func(marks chan<- mark, cts chan<- ctEvent)) []Batch {
	t.Helper()
	var mu sync.Mutex
	var out []Batch
	cfg.Node, cfg.Group, cfg.Index, cfg.Model = "n", 1, policy.NewRuleIndex(), podModel{}
	cfg.Sinks = append(cfg.Sinks, func(b Batch) { mu.Lock(); out = append(out, b); mu.Unlock() })
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	marks, cts := make(chan mark), make(chan ctEvent)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.loop(ctx, marks, cts) }()
	feed(marks, cts)
	time.Sleep(cfg.Grace + 2*cfg.Interval)
	cancel()
	<-done
	return out
}

var (
	podA = netip.MustParseAddr("10.0.0.1")
	podB = netip.MustParseAddr("10.0.0.2")
)

func allowMarks(k flowKey) []mark {
	return []mark{
		{key: k, rule: policy.RuleInfo{ID: "pro-kns.ns/0", Kind: policy.KindProfileRule, Profile: "kns.ns", Direction: "egress", Action: "Allow"}},
		{key: k, rule: policy.RuleInfo{ID: "pri-kns.ns/0", Kind: policy.KindProfileRule, Profile: "kns.ns", Direction: "ingress", Action: "Allow"}},
	}
}

// TestFloodCountedNotStored: 100,000 short connections from one pod to
// another's port (each a NEW, its marks and a DESTROY with counters)
// become one flow counting them all, and the collector's state stays
// small: nothing per connection is left once they ended.
func TestFloodCountedNotStored(t *testing.T) {
	const n = 100_000
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	batches := runLoop(t, Config{Interval: 200 * time.Millisecond, Grace: 50 * time.Millisecond}, func(marks chan<- mark, cts chan<- ctEvent) {
		for i := range n {
			// distinct connections: the source port, then past
			// 65,000 of them the protocol
			k := flowKey{src: podA, dst: podB, proto: []uint8{6, 17}[i/65000], sport: uint16(i % 65000), dport: 80}
			cts <- ctEvent{key: k, at: time.Now()}
			for _, m := range allowMarks(k) {
				marks <- m
			}
			f := conntrack.Flow{CountersOrig: conntrack.Counter{Packets: 3, Bytes: 180}, CountersReply: conntrack.Counter{Packets: 2, Bytes: 120}}
			cts <- ctEvent{key: k, destroy: true, flow: f, at: time.Now()}
		}
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	var started, ended, bytesOut, groups uint64
	for _, b := range batches {
		for _, f := range b.Flows {
			groups++
			started += f.Started
			ended += f.Ended
			bytesOut += f.BytesOut
		}
		if b.DroppedTotal() != 0 {
			t.Errorf("batch %d dropped %v", b.Seq, b.Dropped)
		}
	}
	if started != n || ended != n || bytesOut != 180*n {
		t.Errorf("%d connections: started %d, ended %d, bytes out %d", n, started, ended, bytesOut)
	}
	// Two classes (TCP and UDP) a batch, whatever the number of connections.
	if groups > 2*uint64(len(batches)) {
		t.Errorf("%d groups in %d batches for 2 classes", groups, len(batches))
	}
	t.Logf("%d connections -> %d groups in %d batches; heap %d -> %d KiB", n, groups, len(batches), before.HeapAlloc>>10, after.HeapAlloc>>10)
}

// TestCapsCounted: past MaxPending new connections awaiting marks, and
// past MaxGroups groups, what is turned away is counted in the batch.
func TestCapsCounted(t *testing.T) {
	batches := runLoop(t, Config{Interval: 300 * time.Millisecond, Grace: 100 * time.Millisecond, MaxPending: 100, MaxGroups: 10}, func(marks chan<- mark, cts chan<- ctEvent) {
		for i := range 150 {
			// every connection to its own port: a class each
			k := flowKey{src: podA, dst: podB, proto: 6, sport: 40000, dport: uint16(1000 + i)}
			cts <- ctEvent{key: k, at: time.Now()}
		}
	})
	dropped := map[string]uint64{}
	var started uint64
	for _, b := range batches {
		for r, v := range b.Dropped {
			dropped[r] += v
		}
		for _, f := range b.Flows {
			started += f.Started
		}
	}
	if dropped[DropPending] != 50 || dropped[DropGroups] != 90 || started != 10 {
		t.Errorf("150 connections, 100 pending, 10 groups: dropped %v, started %d", dropped, started)
	}
}
