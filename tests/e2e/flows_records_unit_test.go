package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
)

// TestTallyFlowsFile: BenchmarkFlowCollection's reader of the flows
// file counts what the collector's own writer wrote: the class's
// started connections (traced only where every policed direction named
// its rule), other classes left out, dropped lines summed by reason,
// and a last line still being written left for the next read.
func TestTallyFlowsFile(t *testing.T) {
	src, dst := flowrec.End{Addr: "10.0.0.1", Kind: flowrec.EndPod}, flowrec.End{Addr: "10.0.0.2", Kind: flowrec.EndPod}
	allow := &flowrec.Trace{Verdict: flowrec.Allow, Steps: []policy.RuleInfo{{ID: "pi-gnp:p/0", Action: "Allow"}}}
	unknown := &flowrec.Trace{Verdict: flowrec.Unknown}
	b := flowrec.Batch{Node: "n", Seq: 1, Flows: []flowrec.Flow{
		{Src: src, Dst: dst, Proto: "TCP", DstPort: 7100, Verdict: flowrec.Allow, Ingress: allow, Started: 5},
		{Src: src, Dst: dst, Proto: "TCP", DstPort: 7100, Verdict: flowrec.Allow, Ingress: unknown, Started: 7},
		{Src: src, Dst: dst, Proto: "TCP", DstPort: 5201, Verdict: flowrec.Allow, Ingress: allow, Started: 100},
		{Src: src, Dst: dst, Proto: "UDP", DstPort: 7100, Verdict: flowrec.Allow, Ingress: allow, Started: 100},
		{Src: dst, Dst: src, Proto: "TCP", DstPort: 7100, Verdict: flowrec.Allow, Ingress: allow, Started: 100},
	}, Dropped: map[string]uint64{flowrec.DropCtEvents: 2, flowrec.DropPending: 3}}
	var buf bytes.Buffer
	if err := flowrec.WriteBatch(&buf, b); err != nil {
		t.Fatal(err)
	}
	b.Seq, b.Flows, b.Dropped = 2, b.Flows[:1], nil
	if err := flowrec.WriteBatch(&buf, b); err != nil {
		t.Fatal(err)
	}
	// A line being written: no newline yet.
	buf.WriteString(`{"node":"n","src":{"addr":"10.0.0.1"`)
	path := filepath.Join(t.TempDir(), "flows.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := tallyFlowsFile(path, "10.0.0.1", "10.0.0.2", 7100)
	if err != nil {
		t.Fatal(err)
	}
	if got.Started != 17 || got.Traced != 10 || got.Denied != 0 || got.Dropped != 5 || got.Reasons[flowrec.DropCtEvents] != 2 {
		t.Errorf("tally %+v: want 17 started, 10 traced, 5 dropped (2 ct-overrun)", got)
	}
	if got, err := tallyFlowsFile(filepath.Join(t.TempDir(), "none.jsonl"), "10.0.0.1", "10.0.0.2", 7100); err != nil || got.Started != 0 {
		t.Errorf("a file not written yet: %+v, %v; want an empty tally", got, err)
	}
	if err := os.WriteFile(path, []byte("{\"kind\":\"later\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := tallyFlowsFile(path, "10.0.0.1", "10.0.0.2", 7100); err == nil {
		t.Error("a line of an unknown kind was read without an error")
	}
}

// TestProcCPU: the CPU time read from /proc/PID/stat is the process's
// own account of it (getrusage), to the tick.
func TestProcCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	for rusage() < 300*time.Millisecond {
	}
	got, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	want := rusage()
	if d := want - got; got < 250*time.Millisecond || d < -50*time.Millisecond || d > 50*time.Millisecond {
		t.Errorf("/proc/self/stat says %v of CPU, getrusage %v", got, want)
	}
	if _, err := procCPU(0); err == nil {
		t.Error("pid 0 read without an error")
	}
}
