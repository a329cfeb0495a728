package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// flowsBenchGroup is the nflog group of the flow marks in the "on"
// columns (routed's --policy-log-group is 100 by default).
const flowsBenchGroup = 101

// flowsBenchTail is how long after the connection window routed's CPU
// is still counted: the collector decides a connection up to its grace
// after its first packet (400 ms; with the poll source, which reads a
// connection up to a poll period after it, 1.42 s), and that work
// belongs to the window.
const flowsBenchTail = 3 * time.Second

// flowsBenchSeconds is the length of each iperf3 and connection window:
// FLOWS_BENCH_SECONDS, 5 by default (shorter to check the benchmark
// runs, not to take figures).
func flowsBenchSeconds(b *testing.B) int {
	s := os.Getenv("FLOWS_BENCH_SECONDS")
	if s == "" {
		return 5
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 600 {
		b.Fatalf("FLOWS_BENCH_SECONDS=%q: want whole seconds, 1 to 600", s)
	}
	return n
}

// flowsColumn is one column's sample.
type flowsColumn struct {
	bps, connRate float64
	conns         int           // connections made in the window
	cpu           time.Duration // both nodes' routed, window and tail
	tally         map[string]flowsTally
	// kernel is, by node, the window's first packets the rule that
	// decides the connections counted (new connections, as the
	// kernel's policy saw them).
	kernel map[string]uint64
	warm   int // warm-up connections made before the window
}

// BenchmarkFlowCollection measures, in one lab and one run, what flow
// records (docs/flows.md) cost with the 200 policies of
// BenchmarkPolicyDataplane (each with a source set of 1,000 addresses)
// applied throughout: new TCP connections a second and iperf3 pod to
// pod across two nodes, and the CPU (utime+stime) of the two nodes'
// routed over the connection window and 1 s after it, per 1,000 new
// flows a second (millicores per 1,000 flows/s, which is CPU seconds
// per 1,000 connections). Columns alternate off, on, off, on: off is
// both nodes' routed without --flows-group, on is both restarted with
// --flows-group and --flows-file (a JSON-lines file per node and
// column). Ratios are on/off. FLOWS_BENCH_SECONDS sets the windows
// (default 5).
//
// An "on" column counts only when both nodes' files hold the window's
// connections: each node's deciding rule counts the new connections
// the kernel's policy saw, and the file must record them (started,
// with or without their trace) or count them in its dropped lines. A
// column with hardly any records fails at once (it would be measuring
// nothing); records lost without a dropped count fail the benchmark
// after its figures are logged. Between columns each node's
// nf_conntrack_acct is put back to what it was before flows turned it
// on, so "off" is routed without flows, not without flows' accounting
// only.
func BenchmarkFlowCollection(b *testing.B) {
	secs := flowsBenchSeconds(b)
	l := startLab(b)
	ctx := context.Background()
	n1, n3 := l.Topo.Nodes[0], l.Topo.Nodes[2]
	nodes := []string{n1.Name, n3.Name}
	src, err := l.AddPod(ctx, n1.Name, "fsrc")
	if err != nil {
		b.Fatal(err)
	}
	dst, err := l.AddPod(ctx, n3.Name, "fdst")
	if err != nil {
		b.Fatal(err)
	}
	reachB(b, l, src, dst.IP)
	srv := startConnServer(b, dst)
	if err := l.ApplyYAML(ctx, "bench-flows-policies.yaml", benchPolicyYAML(src.IP, true)); err != nil {
		b.Fatal(err)
	}
	acct := map[string]string{}
	for _, n := range nodes {
		if acct[n], err = nodeSysctl(ctx, n, "net.netfilter.nf_conntrack_acct", ""); err != nil {
			b.Fatal(err)
		}
	}
	if l.NodeArgs == nil {
		l.NodeArgs = map[string][]string{}
	}
	// The rules that decide the connections: the source's profile
	// (no policy selects its egress) and the last of the policies.
	rules := map[string]string{n1.Name: "pro-kns.default/0", n3.Name: "pi-gnp:bench-pzzz/0"}
	fb := &flowsBench{b: b, l: l, nodes: nodes, rules: rules, src: src, dst: dst, srv: srv, acct: acct}

	var cols [2][]flowsColumn
	b.ResetTimer()
	for range b.N {
		for range 2 {
			for k, on := range []bool{false, true} {
				files := fb.restart(ctx, on, len(cols[0])+len(cols[1]))
				cols[k] = append(cols[k], fb.measure(ctx, files, secs))
			}
		}
	}
	b.StopTimer()
	fb.report(cols)
}

// flowsBench is the lab and pods of BenchmarkFlowCollection.
type flowsBench struct {
	b        *testing.B
	l        *lab.Lab
	nodes    []string
	rules    map[string]string // the deciding rule by node
	src, dst lab.Pod
	srv      string
	acct     map[string]string
}

// restart restarts the nodes' routed with flows on or off and waits
// until they are ready, the policies are programmed (with flow marks
// or without) and the pods reach each other.
// It returns the flows files by node (none when off).
func (fb *flowsBench) restart(ctx context.Context, on bool, col int) map[string]string {
	b, l := fb.b, fb.l
	b.Helper()
	files := map[string]string{}
	for _, n := range fb.nodes {
		l.StopNode(n, false)
		if on {
			files[n] = filepath.Join(l.Dir, n, fmt.Sprintf("flows-%d.jsonl", col))
			l.NodeArgs[n] = []string{"--flows-group", strconv.Itoa(flowsBenchGroup), "--flows-file", files[n]}
			if src := os.Getenv("FLOWS_BENCH_SOURCE"); src != "" {
				// --flows-source: auto (routed's default), poll,
				// events (probes where the kernel allows them).
				l.NodeArgs[n] = append(l.NodeArgs[n], "--flows-source", src)
			}
		} else {
			delete(l.NodeArgs, n)
			if _, err := nodeSysctl(ctx, n, "net.netfilter.nf_conntrack_acct", fb.acct[n]); err != nil {
				b.Fatal(err)
			}
		}
		if err := l.StartNode(ctx, n); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range fb.nodes {
		if err := l.WaitNodeReady(ctx, n, 60*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	testenv.Eventually(b, 120*time.Second, 250*time.Millisecond, func() string {
		for _, n := range fb.nodes {
			out, err := l.NodeCtl(ctx, n, "policy", "counters", "pi-gnp:bench-pzzz/0")
			if err != nil {
				return fmt.Sprintf("%s: policy counters: %v", n, err)
			}
			if !strings.Contains(out, "pi-gnp:bench-pzzz/0") {
				return fmt.Sprintf("%s: the 200 policies are not programmed yet", n)
			}
			marks, err := flowMarkRules(ctx, n, flowsBenchGroup)
			if err != nil {
				return err.Error()
			}
			if (marks > 0) != on {
				return fmt.Sprintf("%s: %d flow mark rules of group %d with flows on=%v", n, marks, flowsBenchGroup, on)
			}
		}
		return ""
	})
	reachB(b, l, fb.src, fb.dst.IP)
	return files
}
