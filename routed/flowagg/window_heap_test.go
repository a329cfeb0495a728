package flowagg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/flowrec"
)

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// labelShape makes the labels of an end of flow i.
type labelShape func(i int) map[string]string

// realisticLabels: 10 labels an end, Kubernetes-style keys, values
// distinct per pod.
func realisticLabels(i int) map[string]string {
	lb := map[string]string{}
	for j := range 10 {
		lb[fmt.Sprintf("app.kubernetes.io/label-%d", j)] = fmt.Sprintf("value-%d-%d", i, j)
	}
	return lb
}

// tinyLabels: 150 labels an end of one or two bytes and no value, the
// most map overhead the node's 4 KiB label cap lets through.
func tinyLabels(int) map[string]string {
	lb := map[string]string{}
	for j := range 150 {
		lb[fmt.Sprintf("%x", j)] = ""
	}
	return lb
}

// noLabels: ends without labels, where the entry's fixed costs
// (its structs, its place in the window) are most of it.
func noLabels(int) map[string]string { return nil }

// heapFlow is a flow as a node sends one: both ends pods with labels,
// an ingress trace of one step.
func heapFlow(now time.Time, i int, labels labelShape) flowrec.Flow {
	return flowrec.Flow{
		Node: "node-1", Start: now.Add(-time.Second), End: now,
		Src:   flowrec.End{Addr: "10.0.0.1", Kind: "pod", Namespace: "ns", Name: fmt.Sprintf("client-%d", i), Labels: labels(i)},
		Dst:   flowrec.End{Addr: "10.0.0.2", Kind: "pod", Namespace: "ns", Name: "web", Labels: labels(i)},
		Proto: "TCP", DstPort: 80, Verdict: "allow", Started: 1, Ended: 1, PacketsOut: 10, BytesOut: 1000,
		Ingress: &flowrec.Trace{Verdict: "allow", Steps: []policy.RuleInfo{{ID: "np:ns/web/ingress/0", Kind: policy.KindPolicyRule, Tier: "default", Policy: "np:ns/web", Direction: "ingress", Action: "Allow"}}},
	}
}

// fillThroughDecode sends n flows of the shape into a window with a
// heap budget of budget bytes, each batch as JSON through decodeBatch
// as the server takes it, and returns the window and the heap it holds
// then.
func fillThroughDecode(t *testing.T, budget, n int, labels labelShape) (*Window, uint64) {
	t.Helper()
	w := NewWindow(1_000_000, time.Hour)
	w.maxBytes = budget
	base := heapInUse()
	now := time.Now()
	const per = 5000
	for seq := uint64(1); (int(seq)-1)*per < n; seq++ {
		b := flowrec.Batch{Node: "node-1", Boot: "b1", Seq: seq, Start: now.Add(-time.Second), End: now}
		for i := (int(seq) - 1) * per; i < min(int(seq)*per, n); i++ {
			b.Flows = append(b.Flows, heapFlow(now, i, labels))
		}
		js, err := json.Marshal(&b)
		if err != nil {
			t.Fatal(err)
		}
		var d flowrec.Batch
		if err := decodeBatch(bytes.NewReader(js), &d); err != nil {
			t.Fatal(err)
		}
		if err := w.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	held := heapInUse() - base
	runtime.KeepAlive(w)
	return w, held
}

// TestWindowHeapWithinBudget: whatever the shape of the records, the
// heap the window holds stays near its budget (at most 1.3x), and
// the budget is not wasted (at least 0.7x). Before the budget counted
// an entry's estimated heap it counted its JSON, and these shapes held
// 2.1x and 6.9x of it.
func TestWindowHeapWithinBudget(t *testing.T) {
	const budget = 16 << 20
	for _, c := range []struct {
		name   string
		flows  int
		labels labelShape
	}{
		{"10 realistic labels an end", 10_000, realisticLabels},
		{"150 tiny labels an end", 1_500, tinyLabels},
		{"no labels", 25_000, noLabels},
	} {
		w, held := fillThroughDecode(t, budget, c.flows, c.labels)
		entries, evicted := w.Stats()
		out, _, _ := w.After(0, func(*Entry) bool { return true })
		js := 0
		for i := range out {
			js += jsonSize(&out[i])
		}
		ratio := float64(held) / budget
		t.Logf("%s: %d entries held, %d evicted; heap held %.1f MiB = %.2fx the budget, %.2fx their JSON (%.1f MiB); estimate %.1f MiB = %.2fx the heap",
			c.name, entries, evicted, float64(held)/(1<<20), ratio, float64(held)/float64(js), float64(js)/(1<<20),
			float64(w.Bytes())/(1<<20), float64(w.Bytes())/float64(held))
		if evicted == 0 {
			t.Errorf("%s: nothing evicted; the budget was never reached, so nothing is measured", c.name)
		}
		if ratio > 1.3 || ratio < 0.7 {
			t.Errorf("%s: the window holds %.2fx its heap budget, want 0.7x to 1.3x", c.name, ratio)
		}
		runtime.KeepAlive(w)
	}
}
