package flowrec_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/internal/testenv"
)

// newRetryCollector is a collector of l's on netnsFd whose batches l
// gathers, with a short interval.
func newRetryCollector(t *testing.T, l *flowLab, netnsFd int, source string) *flowrec.Collector {
	t.Helper()
	c, err := flowrec.New(flowrec.Config{Node: "node", NetnsFd: netnsFd, Group: 8, Index: l.m.Index(), Model: l.model, Source: source,
		Interval: 500 * time.Millisecond, Sinks: []func(flowrec.Batch){func(b flowrec.Batch) {
			l.mu.Lock()
			l.batches = append(l.batches, b)
			l.mu.Unlock()
		}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// captureLogs collects the standard logger's entries until the test
// ends.
func captureLogs(t *testing.T) *logtest.Hook {
	hook := new(logtest.Hook)
	std := logrus.StandardLogger()
	old := std.ReplaceHooks(logrus.LevelHooks{})
	std.AddHook(hook)
	t.Cleanup(func() { std.ReplaceHooks(old) })
	return hook
}

// waitLog waits 10 s for a log entry whose message holds msg.
func waitLog(t *testing.T, hook *logtest.Hook, msg string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		entries := hook.AllEntries()
		for _, e := range entries {
			if strings.Contains(e.Message, msg) {
				return ""
			}
		}
		return fmt.Sprintf("no log %q among %d entries", msg, len(entries))
	})
}

// TestCollectorStartsWithGroupHeld: another socket holds the flows'
// nflog group when the collector starts (felix's start racing a
// reader that has not let go yet). The collector starts anyway, says
// so in an error log naming the group, and records flows without
// their trace (noTrace: mark-reader-down); once the group is free its
// reader opens it by itself (backoff) and new connections have their
// traces, without a restart. Before, Open failed and felix gave flows
// up until it restarted.
func TestCollectorStartsWithGroupHeld(t *testing.T) {
	hook := captureLogs(t)
	l := newFlowLabBare(t)
	holder, err := flowlog.Open(l.node.Fd, 8)
	if err != nil {
		t.Fatalf("binding the flows' nflog group first: %v", err)
	}
	t.Cleanup(func() { holder.Close() })
	c := newRetryCollector(t, l, l.node.Fd, "")
	runCollector(t, c)

	a, b := l.pods["a"], l.pods["b"]
	web := match(a.Addr(false), b.Addr(false), "TCP", 8080)
	l.probe("a", "b", "tcp", 8080, false, true)
	f := l.waitFlow("a->b tcp/8080 while the group is held", func(f *flowrec.Flow) bool { return web(f) && f.Started > 0 })
	if f.NoTrace != flowrec.NoTraceMarkReader || f.Verdict != flowrec.Allow {
		t.Errorf("a->b while the group is held: noTrace %q verdict %s, want %q allow", f.NoTrace, f.Verdict, flowrec.NoTraceMarkReader)
	}
	l.waitBatch("a batch with the reader down", func(b *flowrec.Batch) bool { return b.MarkReaderDown && b.MarkReaderFailures == 1 })
	var logged bool
	for _, e := range hook.AllEntries() {
		if strings.Contains(e.Message, "binding the nflog group of flow marks failed") && e.Level == logrus.ErrorLevel &&
			e.Data["group"] == uint16(8) && e.Data[logrus.ErrorKey] != nil {
			logged = true
		}
	}
	if !logged {
		t.Error("no error log naming the group the collector could not bind")
	}

	holder.Close()
	from := l.mark()
	l.waitBatchAfter(from, "a batch with the reader up", func(b *flowrec.Batch) bool { return !b.MarkReaderDown })
	from = l.mark()
	l.probe("a", "b", "tcp", 8080, false, true)
	l.waitFlowAfter(from, "a->b tcp/8080 with its trace once the group is free", func(f *flowrec.Flow) bool {
		return web(f) && f.NoTrace == "" && f.Egress != nil && f.Egress.Verdict == flowrec.Allow && f.Ingress.Decider().Policy == "np:prod/web"
	})
}

// TestCollectorStartsBeforeItsNamespace: neither source can be opened
// at the start (the namespace's descriptor is not a namespace yet:
// /dev/null in its place), so the conntrack source (the event socket
// here, where the kernel refuses the probes; the poll source with
// Source poll) starts failed and the nflog reader down. Once the
// descriptor is the namespace both open by themselves, the conntrack
// source on its retry (every second): a connection then gets its trace
// and its end with its counters, which only conntrack gives.
func TestCollectorStartsBeforeItsNamespace(t *testing.T) {
	for _, src := range []string{flowrec.SourceAuto, flowrec.SourcePoll} {
		t.Run(src, func(t *testing.T) { testStartsBeforeNamespace(t, src) })
	}
}

func testStartsBeforeNamespace(t *testing.T, src string) {
	hook := captureLogs(t)
	l := newFlowLabBare(t)
	if src == flowrec.SourcePoll {
		l.closeTimeouts(pollCloseTimeout)
	}
	fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	c := newRetryCollector(t, l, fd, src)
	runCollector(t, c)
	l.waitBatch("a batch counting the failed subscription", func(b *flowrec.Batch) bool {
		return b.MarkReaderDown && b.Dropped[flowrec.DropCtEvents] >= 1
	})

	// The descriptor becomes the namespace.
	if err := unix.Dup3(l.node.Fd, fd, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	from := l.mark()
	l.waitBatchAfter(from, "a batch with the reader up", func(b *flowrec.Batch) bool { return !b.MarkReaderDown })
	if src == flowrec.SourcePoll {
		waitLog(t, hook, "conntrack table: read again")
	} else {
		waitLog(t, hook, "conntrack events: subscribed again")
	}
	a, b := l.pods["a"], l.pods["b"]
	web := match(a.Addr(false), b.Addr(false), "TCP", 8080)
	from = l.mark()
	// A closed connection's entry is reaped when a connection from the
	// same source port finds it (lab_test.go): its DESTROY.
	for range 2 {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(false), Port: 8080, SrcPort: 41001}, true, "a->b from port 41001")
	}
	f := l.waitFlowAfter(from, "a->b tcp/8080 ended, with its trace and counters", func(f *flowrec.Flow) bool {
		return web(f) && f.Ended > 0
	})
	if f.NoTrace != "" || f.Ingress.Decider().Policy != "np:prod/web" || f.PacketsOut == 0 || f.BytesIn == 0 {
		t.Errorf("a->b after both opened: noTrace %q ingress %s, %d packets out, %d bytes in", f.NoTrace, steps(f.Ingress), f.PacketsOut, f.BytesIn)
	}
}
