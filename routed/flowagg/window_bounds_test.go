package flowagg

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/testenv"
)

func boundsBatch(node string, seq uint64, flows ...flowrec.Flow) flowrec.Batch {
	now := time.Now()
	return flowrec.Batch{Node: node, Boot: "b1", Seq: seq, Start: now.Add(-time.Second), End: now, Flows: flows}
}

func flowWithPod(pod string) flowrec.Flow {
	return flowrec.Flow{Src: flowrec.End{Name: pod}, Proto: "tcp", DstPort: 80, Verdict: "allow"}
}

// TestWindowMemoryBounds: what a sender cannot make the aggregator hold.
// A record larger than the record cap is counted as dropped, not kept;
// the records kept never exceed the byte budget (the oldest go, counted
// as evicted), however few they are; a node beyond the node cap is
// refused, one already tracked is not.
func TestWindowMemoryBounds(t *testing.T) {
	w := NewWindow(100_000, time.Hour)
	w.maxRecord, w.maxBytes, w.maxNodes = 2048, 20_000, 3

	if err := w.Add(boundsBatch("n1", 1, flowWithPod(strings.Repeat("x", 4096)), flowWithPod("small"))); err != nil {
		t.Fatal(err)
	}
	out, _, _ := w.After(0, func(*Entry) bool { return true })
	var tooLarge uint64
	pods := []string{}
	for _, e := range out {
		if e.Gap != nil && e.Gap.Reason == GapDropped {
			tooLarge = e.Gap.Dropped["record-too-large"]
		}
		if e.Flow != nil {
			pods = append(pods, e.Flow.Src.Name)
		}
	}
	if tooLarge != 1 || len(pods) != 1 || pods[0] != "small" {
		t.Fatalf("after a record over the cap: too-large counted %d, flows kept %q (want 1, [small])", tooLarge, pods)
	}

	for i := 2; i < 200; i++ {
		if err := w.Add(boundsBatch("n1", uint64(i), flowWithPod(fmt.Sprintf("pod-%03d-%s", i, strings.Repeat("y", 500))))); err != nil {
			t.Fatal(err)
		}
		if b := w.Bytes(); b > w.maxBytes {
			t.Fatalf("batch %d: the window holds %d bytes, over its budget %d", i, b, w.maxBytes)
		}
	}
	if _, evicted := w.Stats(); evicted == 0 {
		t.Error("nothing evicted although 200 records of 600 bytes cannot fit 20,000 bytes")
	}
	out, _, _ = w.After(0, func(e *Entry) bool { return e.Flow != nil })
	if len(out) == 0 || out[len(out)-1].Flow.Src.Name[:7] != "pod-199" {
		t.Errorf("the newest record is not kept: %d flows held", len(out))
	}

	for _, n := range []string{"n2", "n3"} {
		if err := w.Add(boundsBatch(n, 1, flowWithPod("p"))); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add(boundsBatch("n4", 1, flowWithPod("p"))); !errors.Is(err, ErrTooManyNodes) {
		t.Errorf("a fourth node with a cap of 3: %v, want ErrTooManyNodes", err)
	}
	if err := w.Add(boundsBatch("n2", 2, flowWithPod("p"))); err != nil {
		t.Errorf("a tracked node's next batch: %v", err)
	}
}

// TestWindowBatchPieces: the pieces of a split batch are taken in
// order without a gap; a piece resent is skipped; a piece lost (the
// next piece or batch arrives instead) is a batches-missing gap.
func TestWindowBatchPieces(t *testing.T) {
	w := NewWindow(1000, time.Hour)
	missing := func() int {
		out, _, _ := w.After(0, func(*Entry) bool { return true })
		n := 0
		for _, e := range out {
			if e.Gap != nil && e.Gap.Reason == GapMissing {
				n++
			}
		}
		return n
	}
	piece := func(seq uint64, part int) flowrec.Batch {
		b := boundsBatch("n1", seq, flowWithPod(fmt.Sprintf("p%d-%d", seq, part)))
		b.Part = part
		return b
	}
	for _, b := range []flowrec.Batch{piece(1, 0), piece(1, 1), piece(1, 1), piece(2, 0), piece(2, 1)} {
		if err := w.Add(b); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := w.Stats(); n != 5 || missing() != 0 {
		t.Errorf("pieces in order (one resent): %d entries, %d missing gaps; want 5, 0", n, missing())
	}
	_ = w.Add(piece(2, 3)) // piece 2 lost
	_ = w.Add(piece(3, 1)) // piece 0 of batch 3 lost
	if missing() != 2 {
		t.Errorf("two lost pieces: %d missing gaps, want 2", missing())
	}
}

// TestWindowForgetsQuietNodes: at the node cap, nodes not heard from
// for longer than the window's MaxAge are forgotten and a new node is
// taken; while they are recent, it is refused.
func TestWindowForgetsQuietNodes(t *testing.T) {
	w := NewWindow(1000, 300*time.Millisecond)
	w.maxNodes = 2
	for _, n := range []string{"n1", "n2"} {
		if err := w.Add(boundsBatch(n, 1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Add(boundsBatch("n3", 1)); !errors.Is(err, ErrTooManyNodes) {
		t.Fatalf("a third node at once: %v, want ErrTooManyNodes", err)
	}
	testenv.Eventually(t, 5*time.Second, 50*time.Millisecond, func() string {
		if err := w.Add(boundsBatch("n3", 1)); err != nil {
			return fmt.Sprintf("n1 and n2 quiet (MaxAge 300 ms), n3 still refused: %v", err)
		}
		return ""
	})
}
