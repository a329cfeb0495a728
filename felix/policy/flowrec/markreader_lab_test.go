package flowrec_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testenv"
)

// TestMarkReaderRestarts: the collector's nflog reader (the source of
// the traces) fails when its socket is closed under it. The failure is
// logged once with its cause, counted in the batch and the metric, and
// the flows decided while the reader is down (another socket holds the
// nflog group, so opening it again fails) carry noTrace instead of an
// unexplained unknown trace. Once the group is free the reader runs
// again on its own (backoff) and new connections have their traces.
func TestMarkReaderRestarts(t *testing.T) {
	hook := new(logtest.Hook)
	std := logrus.StandardLogger()
	old := std.ReplaceHooks(logrus.LevelHooks{})
	std.AddHook(hook)
	t.Cleanup(func() { std.ReplaceHooks(old) })

	l := newFlowLabBare(t)
	reg := prometheus.NewRegistry()
	metrics, err := flowrec.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := flowrec.New(flowrec.Config{Node: "node", NetnsFd: l.node.Fd, Group: 8, Index: l.m.Index(), Model: l.model,
		Interval: 500 * time.Millisecond, Sinks: []func(flowrec.Batch){metrics.Sink, func(b flowrec.Batch) {
			l.mu.Lock()
			l.batches = append(l.batches, b)
			l.mu.Unlock()
		}}})
	if err != nil {
		t.Fatal(err)
	}
	runCollector(t, c)
	a, b := l.pods["a"], l.pods["b"]
	web := match(a.Addr(false), b.Addr(false), "TCP", 8080)
	traced := func(f *flowrec.Flow) bool {
		return web(f) && f.NoTrace == "" && f.Egress != nil && f.Egress.Verdict == flowrec.Allow && f.Ingress.Decider().Policy == "np:prod/web"
	}

	l.probe("a", "b", "tcp", 8080, false, true)
	l.waitFlow("a->b tcp/8080 with its trace", traced)

	// The reader fails; another socket takes the group before the
	// collector opens it again, so it stays down.
	if err := c.BreakMarkReader(); err != nil {
		t.Fatal(err)
	}
	holder, err := flowlog.Open(l.node.Fd, 8)
	if err != nil {
		t.Fatalf("binding the nflog group the collector's reader left: %v", err)
	}
	t.Cleanup(func() { holder.Close() })
	l.waitBatch("a batch counting the reader's failure", func(b *flowrec.Batch) bool { return b.MarkReaderFailures == 1 && b.MarkReaderDown })
	if got := gauge(t, reg, "routed_flows_mark_reader_up"); got != 0 {
		t.Errorf("routed_flows_mark_reader_up %v while the reader is down, want 0", got)
	}
	from := l.mark()
	l.probe("a", "b", "tcp", 8080, false, true)
	f := l.waitFlowAfter(from, "a->b tcp/8080 without trace, marked", func(f *flowrec.Flow) bool { return web(f) && f.Started > 0 })
	if f.NoTrace != flowrec.NoTraceMarkReader || f.Verdict != flowrec.Allow || f.Egress == nil || f.Egress.Verdict != flowrec.Unknown {
		t.Errorf("a->b while the reader is down: noTrace %q verdict %s egress %s ingress %s", f.NoTrace, f.Verdict, steps(f.Egress), steps(f.Ingress))
	}
	// Let a few attempts to open the group fail (100, 200, 400 ms).
	time.Sleep(800 * time.Millisecond)

	// The group is free: the reader runs again by itself.
	holder.Close()
	from = l.mark()
	l.waitBatchAfter(from, "a batch with the reader back", func(b *flowrec.Batch) bool { return !b.MarkReaderDown })
	from = l.mark()
	l.probe("a", "b", "tcp", 8080, false, true)
	l.waitFlowAfter(from, "a->b tcp/8080 with its trace again", traced)

	if got := gauge(t, reg, "routed_flows_mark_reader_failures_total"); got != 1 {
		t.Errorf("routed_flows_mark_reader_failures_total %v, want 1", got)
	}
	if got := gauge(t, reg, "routed_flows_mark_reader_up"); got != 1 {
		t.Errorf("routed_flows_mark_reader_up %v after the restart, want 1", got)
	}
	var failed, back int
	for _, e := range hook.AllEntries() {
		switch {
		case strings.Contains(e.Message, "nflog reader of flow marks failed"):
			failed++
			if e.Level != logrus.ErrorLevel || e.Data[logrus.ErrorKey] == nil || !strings.Contains(e.Data[logrus.ErrorKey].(error).Error(), "closed") {
				t.Errorf("the failure's log: level %s, fields %v: want an error naming the closed socket", e.Level, e.Data)
			}
		case strings.Contains(e.Message, "nflog reader of flow marks runs again"):
			back++
		}
	}
	if failed != 1 || back != 1 {
		t.Errorf("logged the failure %d times and the restart %d times, want once each", failed, back)
	}
}

// mark is where the batches seen so far end.
func (l *flowLab) mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.batches)
}

// waitBatch waits 10 s for a batch want accepts.
func (l *flowLab) waitBatch(what string, want func(*flowrec.Batch) bool) {
	l.t.Helper()
	l.waitBatchAfter(0, what, want)
}

func (l *flowLab) waitBatchAfter(from int, what string, want func(*flowrec.Batch) bool) {
	l.t.Helper()
	testenv.Eventually(l.t, 10*time.Second, 50*time.Millisecond, func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		for i := from; i < len(l.batches); i++ {
			if want(&l.batches[i]) {
				return ""
			}
		}
		return fmt.Sprintf("no %s in the %d batches since batch %d", what, max(len(l.batches)-from, 0), from)
	})
}

// waitFlowAfter waits 10 s for a flow want accepts in a batch from
// from on.
func (l *flowLab) waitFlowAfter(from int, what string, want func(*flowrec.Flow) bool) flowrec.Flow {
	l.t.Helper()
	var found flowrec.Flow
	testenv.Eventually(l.t, 10*time.Second, 50*time.Millisecond, func() string {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := 0
		for i := from; i < len(l.batches); i++ {
			for j := range l.batches[i].Flows {
				if f := l.batches[i].Flows[j]; want(&f) {
					found = f
					return ""
				}
				n++
			}
		}
		return fmt.Sprintf("no flow %s among the %d flows since batch %d", what, n, from)
	})
	return found
}

// gauge is the value of an unlabelled counter or gauge of reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name || len(mf.Metric) != 1 {
			continue
		}
		if m := mf.Metric[0]; m.Counter != nil {
			return m.Counter.GetValue()
		} else if m.Gauge != nil {
			return m.Gauge.GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
