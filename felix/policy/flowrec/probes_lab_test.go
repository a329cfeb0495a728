package flowrec_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/internal/testenv"
)

// TestConntrackProbesInVM: the kernel conntrack source (fexit programs
// on __nf_conntrack_confirm and nf_ct_delete) reports what ctnetlink's
// events report, read side by side in the flow lab's node: the same
// NEW and DESTROY for TCP, UDP and ICMP over IPv4 and IPv6, the same
// counters on each DESTROY, and nothing of another namespace's
// connections (the programs see every namespace's conntrack). Runs in
// the VM of tests/vm (this machine's kernel refuses fexit programs);
// elsewhere the collector's fallback to ctnetlink is what the other
// tests exercise.
func TestConntrackProbesInVM(t *testing.T) {
	if os.Getenv("ROUTED_IN_VM") != "1" {
		t.Skip("runs inside the VM booted by tests/vm (TestIPIPInVM there), which sets ROUTED_IN_VM=1")
	}
	l := newFlowLabBare(t)
	probes, closeProbes, desc, err := flowrec.OpenSource("probes", l.node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeProbes)
	t.Log(desc)
	events, closeEvents, _, err := flowrec.OpenSource("events", l.node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeEvents)

	// Another namespace's connections, which the probes must not take.
	other := newFlowLabBare(t)
	other.probe("a", "c", "tcp", 8080, false, true)
	other.probe("a", "c", "udp", 5353, false, true)

	for _, v6 := range []bool{false, true} {
		l.probe("a", "c", "tcp", 8080, v6, true)
		l.probe("a", "c", "udp", 5353, v6, true)
		l.probe("a", "c", "icmp", 0, v6, true)
	}
	// UDP and ICMP entries end only by timeout (30 s): flushed, every
	// entry is deleted (nf_ct_delete) at once.
	h, err := netlink.NewHandleAt(netns.NsHandle(l.node.Fd), unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var got, want []string
	testenv.Eventually(t, 15*time.Second, 200*time.Millisecond, func() string {
		if err := h.ConntrackTableFlush(netlink.ConntrackTable); err != nil {
			return fmt.Sprintf("flushing conntrack: %v", err)
		}
		got = append(got, describe(probes())...)
		want = append(want, describe(events())...)
		slices.Sort(got)
		slices.Sort(want)
		// Six connections, each a NEW and a DESTROY.
		if len(want) < 12 || !slices.Equal(got, want) {
			return fmt.Sprintf("probes:\n%s\nctnetlink's events:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		return ""
	})
	for _, e := range got {
		if strings.HasPrefix(e, "DESTROY") && strings.Contains(e, " 0/0 0/0") {
			t.Errorf("a DESTROY without counters: %s", e)
		}
	}
	t.Logf("%d events alike:\n%s", len(got), strings.Join(got, "\n"))
}

func describe(evs []flowrec.CtEvent) []string {
	var out []string
	for _, e := range evs {
		kind := "NEW"
		if e.Destroy {
			kind = "DESTROY"
		}
		out = append(out, fmt.Sprintf("%s %d %s:%d -> %s:%d %d/%d %d/%d", kind, e.Proto, e.Src, e.Sport, e.Dst, e.Dport, e.PktsOut, e.BytesOut, e.PktsIn, e.BytesIn))
	}
	return out
}

// TestCollectorFallsBackToEvents: a kernel that refuses the probes (here
// they name functions no kernel has) leaves the collector on ctnetlink's
// events, and connections are still recorded, with their counters.
// With Source poll the collector reads the table by generations and
// records the same.
func TestCollectorFallsBackToEvents(t *testing.T) {
	for _, src := range []string{flowrec.SourceAuto, flowrec.SourcePoll} {
		t.Run(src, func(t *testing.T) { testFallsBack(t, src) })
	}
}

func testFallsBack(t *testing.T, src string) {
	l := newFlowLabBare(t)
	if src == flowrec.SourcePoll {
		l.closeTimeouts(pollCloseTimeout)
	}
	c, err := flowrec.New(flowrec.Config{Node: "node", NetnsFd: l.node.Fd, Group: 8, Index: l.m.Index(), Model: l.model, Source: src,
		Interval: time.Second, Sinks: []func(flowrec.Batch){func(b flowrec.Batch) {
			l.mu.Lock()
			l.batches = append(l.batches, b)
			l.mu.Unlock()
		}}})
	if err != nil {
		t.Fatal(err)
	}
	flowrec.BreakProbes(c)
	runCollector(t, c)
	want := flowrec.SourceEvents
	if src == flowrec.SourcePoll {
		want = flowrec.SourcePoll
	}
	if c.Source() != want {
		t.Fatalf("source %q, want %q", c.Source(), want)
	}
	a, b := l.pods["a"], l.pods["b"]
	// From one source port twice: the second connection finds the
	// first's expired entry and ends it (the kernel's sweep may wait a
	// minute; TestFlowVerdicts).
	for range 2 {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(false), Port: 8080, SrcPort: 41001}, true, "a->b from port 41001")
	}
	ab := match(a.Addr(false), b.Addr(false), "TCP", 8080)
	l.waitFlow("a->b tcp/8080 started, allowed", func(f *flowrec.Flow) bool {
		return ab(f) && f.Started > 0 && f.Verdict == flowrec.Allow
	})
	l.waitFlow("a->b tcp/8080 ended with its counters", func(f *flowrec.Flow) bool {
		return ab(f) && f.Ended > 0 && f.PacketsOut > 0 && f.PacketsIn > 0
	})
}

// TestCollectorSourceRefused: a collector told to take the probes only
// fails to open where the kernel refuses them, naming why; an unknown
// source is a configuration error.
func TestCollectorSourceRefused(t *testing.T) {
	l := newFlowLabBare(t)
	cfg := flowrec.Config{Node: "node", NetnsFd: l.node.Fd, Group: 8, Index: l.m.Index(), Model: l.model, Source: "ebpf"}
	if _, err := flowrec.New(cfg); err == nil || !strings.Contains(err.Error(), `source "ebpf"`) {
		t.Fatalf("source ebpf: %v", err)
	}
	cfg.Source = flowrec.SourceProbes
	c, err := flowrec.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	flowrec.BreakProbes(c)
	if err := c.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "routed_no_such_function_start") {
		t.Fatalf("open with the probes refused: %v", err)
	}
}
