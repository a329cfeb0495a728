package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/cutproxy"
	"github.com/routed-net/routed/internal/flowaggtest"
	"github.com/routed-net/routed/routed/flowagg"
)

const followToken = "a-reader-token-of-some-length"

// TestFlowsFollowResumes: routedctl flows -f against a real aggregator
// keeps following through a broken stream (its connection cut) and
// through the aggregator's restart: each flow is printed once, the
// restart shows as the new aggregator's gap, and Ctrl-C while the
// aggregator is gone ends it at once, without an error.
func TestFlowsFollowResumes(t *testing.T) {
	srv := flowaggtest.Start(t, followToken)
	px := cutproxy.Start(t, strings.TrimPrefix(srv.URL, "https://"))
	f := startFollow(t, srv, px.Addr())

	addFlows(t, srv, 1, 1001, 1002)
	f.waitOut(t, "the first flows", func(s followSeen) bool { return s.ports[1001] == 1 && s.ports[1002] == 1 })

	px.Drop() // a port-forward dropping the stream; the aggregator stays
	f.waitErr(t, "the reconnection", func(s string) bool { return strings.Count(s, "reconnected to the aggregator") == 1 })
	addFlows(t, srv, 2, 1003)
	f.waitOut(t, "the flow after the reconnection", func(s followSeen) bool { return s.ports[1003] == 1 })

	srv.Restart(t)
	f.waitOut(t, "the new aggregator's gap", func(s followSeen) bool { return s.gaps[flowagg.GapAggregator] == 2 })
	addFlows(t, srv, 3, 1004)
	f.waitOut(t, "the flow after the restart", func(s followSeen) bool { return s.ports[1004] == 1 })

	seen := f.seen()
	for p, n := range seen.ports {
		if n != 1 {
			t.Errorf("port %d printed %d times:\n%s", p, n, f.out.String())
		}
	}
	if seen.gaps[flowagg.GapEvicted] != 0 || len(seen.ports) != 4 {
		t.Errorf("want ports 1001-1004 once and the two aggregators' gaps:\n%s", f.out.String())
	}
	if !strings.Contains(f.errOut.String(), "lost the stream") {
		t.Errorf("stderr does not say the stream was lost:\n%s", f.errOut.String())
	}

	srv.Stop()
	f.waitErr(t, "the loss noted", func(s string) bool { return strings.Count(s, "lost the stream") == 3 })
	t.Logf("stdout:\n%s\nstderr:\n%s", f.out.String(), f.errOut.String())
	f.cancel()
	select {
	case <-f.done:
		if f.err != nil {
			t.Errorf("interrupted while reconnecting: %v, want nil", f.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Ctrl-C while reconnecting did not stop routedctl flows -f within 2 s")
	}
}

// TestFlowsFollowEvictedGap: while a follower is away, the window's cap
// evicts the entries after its last one: on reconnecting it prints a
// window-evicted gap, then what the window holds, none twice.
func TestFlowsFollowEvictedGap(t *testing.T) {
	srv := flowaggtest.StartWith(t, followToken, func(c *flowagg.Config) { c.MaxEntries = 4 })
	px := cutproxy.Start(t, strings.TrimPrefix(srv.URL, "https://"))
	f := startFollow(t, srv, px.Addr())
	addFlows(t, srv, 1, 2001)
	f.waitOut(t, "the first flow", func(s followSeen) bool { return s.ports[2001] == 1 })

	px.Cut()
	f.waitErr(t, "the loss noted", func(s string) bool { return strings.Contains(s, "lost the stream") })
	addFlows(t, srv, 2, 2002, 2003, 2004, 2005, 2006, 2007, 2008, 2009)
	px.Heal()
	f.waitOut(t, "the window after the eviction", func(s followSeen) bool { return s.ports[2009] == 1 })
	f.cancel()
	<-f.done

	seen := f.seen()
	if seen.gaps[flowagg.GapEvicted] != 1 || seen.gaps[flowagg.GapAggregator] != 1 {
		t.Errorf("want one window-evicted gap, and the aggregator's start once:\n%s", f.out.String())
	}
	for p := 2002; p <= 2005; p++ {
		if seen.ports[p] != 0 {
			t.Errorf("port %d printed although evicted before the reconnection:\n%s", p, f.out.String())
		}
	}
	for _, p := range []int{2001, 2006, 2007, 2008, 2009} {
		if seen.ports[p] != 1 {
			t.Errorf("port %d printed %d times, want once:\n%s", p, seen.ports[p], f.out.String())
		}
	}
	// The gap comes between what was printed before and after, and
	// spans them: from the last flow printed to the first still held.
	var order []string
	var last, gap flowagg.Entry
	for _, l := range strings.Split(strings.TrimSpace(f.out.String()), "\n") {
		var e flowagg.Entry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		switch {
		case e.Gap != nil && e.Gap.Reason == flowagg.GapEvicted:
			order, gap = append(order, "gap"), e
			if !e.Gap.From.Equal(last.Received) || e.Gap.Evicted != 4 {
				t.Errorf("gap %+v, want from %v (the last flow printed) and 4 evicted", *e.Gap, last.Received)
			}
		case e.Flow != nil && (e.Flow.DstPort == 2001 || e.Flow.DstPort == 2006):
			order = append(order, "flow")
			if e.Flow.DstPort == 2006 && gap.Gap != nil && !gap.Gap.To.Equal(e.Received) {
				t.Errorf("gap %+v, want to %v (the first flow still held)", *gap.Gap, e.Received)
			}
		}
		if e.Seq != 0 {
			last = e
		}
	}
	if strings.Join(order, ",") != "flow,gap,flow" {
		t.Errorf("order %v, want flow,gap,flow:\n%s", order, f.out.String())
	}
}

// TestResumeFindsItsPlace: the cases a reconnected stream can be in,
// with the aggregator serving each stream from the start of its window.
func TestResumeFindsItsPlace(t *testing.T) {
	t0 := time.Now()
	at := func(d int) time.Time { return t0.Add(time.Duration(d) * time.Millisecond) }
	flow := func(seq uint64, d int) flowagg.Entry {
		return flowagg.Entry{Seq: seq, Received: at(d), Flow: &flowrec.Flow{DstPort: uint16(seq)}}
	}
	start := func(d int) flowagg.Entry {
		return flowagg.Entry{Seq: 1, Received: at(d), Gap: &flowagg.Gap{Node: "*", To: at(d), Reason: flowagg.GapAggregator}}
	}
	evicted := func(d int) flowagg.Entry {
		return flowagg.Entry{Received: at(20), Gap: &flowagg.Gap{Node: "*", To: at(d), Reason: flowagg.GapEvicted, Evicted: 1}}
	}
	for _, c := range []struct {
		name   string
		stream []flowagg.Entry
		want   string // what is printed: flow seqs, gap reasons
	}{
		{"same window", []flowagg.Entry{start(0), flow(2, 1), flow(3, 2), flow(4, 3)}, "4"},
		{"same window, start evicted", []flowagg.Entry{evicted(1), flow(2, 1), flow(3, 2), flow(4, 3)}, "4"},
		{"same window, last evicted, told by the aggregator", []flowagg.Entry{evicted(5), flow(6, 5), flow(7, 6)}, "window-evicted,6,7"},
		{"new aggregator, start evicted, told by the aggregator", []flowagg.Entry{evicted(11), flow(5, 12)}, "window-evicted,5"},
		{"same window, last evicted", []flowagg.Entry{flow(6, 5), flow(7, 6)}, "window-evicted,6,7"},
		{"same window, the next entry first", []flowagg.Entry{flow(4, 5)}, "4"},
		{"new aggregator", []flowagg.Entry{start(10), flow(2, 11)}, "aggregator-started,2"},
		{"new aggregator, start evicted, same number", []flowagg.Entry{flow(2, 11), flow(3, 12), flow(4, 13)}, "aggregator-started,3,4"},
		{"new aggregator, start evicted, skipped past", []flowagg.Entry{flow(2, 11), flow(5, 12)}, "aggregator-started,5"},
	} {
		r := resume{last: flow(3, 2)}
		r.reconnected()
		var got []string
		for _, e := range c.stream {
			if err := r.take(e, func(e flowagg.Entry) error {
				if e.Gap != nil {
					got = append(got, e.Gap.Reason)
				} else {
					got = append(got, strconv.Itoa(int(e.Flow.DstPort)))
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("%s: printed %v, want %s", c.name, got, c.want)
		}
	}
}

// addFlows sends node-a's batch seq with a flow to each port.
func addFlows(t *testing.T, srv *flowaggtest.Aggregator, seq uint64, ports ...int) {
	t.Helper()
	now := time.Now()
	b := flowrec.Batch{Node: "node-a", Boot: "boot-1", Seq: seq, Start: now.Add(-time.Second), End: now}
	for _, p := range ports {
		b.Flows = append(b.Flows, flowrec.Flow{End: now, Src: flowrec.End{Addr: "10.65.0.1"}, Dst: flowrec.End{Addr: "10.65.0.2"},
			Proto: "TCP", DstPort: uint16(p), Verdict: flowrec.Allow, Started: 1})
	}
	if err := srv.Window().Add(b); err != nil {
		t.Fatal(err)
	}
}

// follower is routedctl flows -f -o json running against an aggregator.
type follower struct {
	out, errOut *lockedBuffer
	cancel      func()
	done        chan struct{}
	err         error // once done
}

func startFollow(t *testing.T, srv *flowaggtest.Aggregator, addr string) *follower {
	f := &follower{out: &lockedBuffer{}, errOut: &lockedBuffer{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	cmd := New(f.out, f.errOut)
	cmd.SetArgs([]string{"flows", "--server", "https://" + addr, "--ca-file", srv.PKI.CAFile, "--token-file", srv.TokenFile, "-f", "-o", "json", "--timeout", "2s"})
	go func() { defer close(f.done); f.err = cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-f.done
		if f.err != nil {
			t.Errorf("routedctl flows -f: %v", f.err)
		}
	})
	return f
}

// followSeen counts the flows printed by port and the gaps by reason.
type followSeen struct {
	ports map[int]int
	gaps  map[string]int
}

func (f *follower) seen() followSeen {
	s := followSeen{ports: map[int]int{}, gaps: map[string]int{}}
	for _, l := range strings.Split(f.out.String(), "\n") {
		var e flowagg.Entry
		if l == "" || json.Unmarshal([]byte(l), &e) != nil {
			continue
		}
		if e.Flow != nil {
			s.ports[int(e.Flow.DstPort)]++
		}
		if e.Gap != nil {
			s.gaps[e.Gap.Reason]++
		}
	}
	return s
}

// waitOut waits up to 10 s for what was printed to satisfy ok.
func (f *follower) waitOut(t *testing.T, what string, ok func(followSeen) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(f.seen()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s not printed within 10 s:\n%s\nstderr:\n%s", what, f.out.String(), f.errOut.String())
		}
	}
}

// waitErr waits up to 10 s for stderr to satisfy ok.
func (f *follower) waitErr(t *testing.T, what string, ok func(string) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !ok(f.errOut.String()); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s not on stderr within 10 s:\n%s\nstdout:\n%s", what, f.errOut.String(), f.out.String())
		}
	}
}

// lockedBuffer is a buffer written by the command and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestFlowsFollowSilentReconnects: a follower whose stream falls silent
// past its bound (shortened to 300 ms here, so the real aggregator's
// quiet stream trips it again and again) reconnects each time and
// still prints each flow once, with no gap but the aggregator's start.
func TestFlowsFollowSilentReconnects(t *testing.T) {
	srv := flowaggtest.Start(t, followToken)
	c, err := newFlowsClient(flowagg.ReaderConfig{URL: srv.URL, CAFile: srv.PKI.CAFile, Token: followToken}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.idle = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		ports = map[int]int{}
		gaps  []string
	)
	notice := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- readFlows(ctx, c, flowagg.Filter{}, true, notice, func(e flowagg.Entry) error {
			mu.Lock()
			defer mu.Unlock()
			if e.Flow != nil {
				ports[int(e.Flow.DstPort)]++
			} else {
				gaps = append(gaps, e.Gap.Reason)
			}
			return nil
		})
	}()
	for i := range 8 {
		addFlows(t, srv, uint64(i+1), 3000+i)
		time.Sleep(450 * time.Millisecond) // past the bound: a silence between each
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := ports[3007]
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the last flow not printed within 10 s; stderr:\n%s", notice.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("readFlows: %v, want context.Canceled", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Count(notice.String(), "reconnected") < 2 || !strings.Contains(notice.String(), stepLine) {
		t.Errorf("want several reconnections after silences; stderr:\n%s", notice.String())
	}
	for i := range 8 {
		if ports[3000+i] != 1 {
			t.Errorf("port %d printed %d times, want once", 3000+i, ports[3000+i])
		}
	}
	if strings.Join(gaps, ",") != flowagg.GapAggregator {
		t.Errorf("gaps %v, want only the aggregator's start", gaps)
	}
}

// TestFlowsPrintEvictedGap: the table prints the gap a follower makes
// when its place left the window, with its span and count.
func TestFlowsPrintEvictedGap(t *testing.T) {
	last := flowagg.Entry{Seq: 2, Received: time.Date(2026, 1, 2, 10, 31, 2, 0, time.Local)}
	next := flowagg.Entry{Seq: 7, Received: time.Date(2026, 1, 2, 10, 31, 9, 0, time.Local)}
	r := resume{last: last}
	r.reconnected()
	var out bytes.Buffer
	p := newFlowPrinter(&out, "")
	if err := r.take(next, func(e flowagg.Entry) error {
		if e.Gap == nil {
			return nil
		}
		return p.print(e)
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "10:31:09  *     GAP: window-evicted from 10:31:02 (4 entries)") {
		t.Errorf("printed:\n%s", out.String())
	}
}
