package flowagg

import (
	"fmt"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

// costBatch is a batch of n distinct flows of node.
func costBatch(node string, seq uint64, n int) flowrec.Batch {
	b := boundsBatch(node, seq)
	for i := range n {
		f := flowWithPod(fmt.Sprintf("pod-%d", i))
		f.DstPort = uint16(i)
		b.Flows = append(b.Flows, f)
	}
	return b
}

// fullWindow is a window of max entries, full.
func fullWindow(t testing.TB, max int) *Window {
	w := NewWindow(max, time.Hour)
	for seq := uint64(1); ; seq++ {
		if n, _ := w.Stats(); n >= max {
			return w
		}
		if err := w.Add(costBatch("filler", seq, 1000)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWindowAfterFindsFollowerStart: a follower's After(seq) returns
// exactly the entries after seq, oldest first, in a window that has
// evicted and compacted many times; a follower behind the eviction is
// told so by a gap.
func TestWindowAfterFindsFollowerStart(t *testing.T) {
	w := NewWindow(3000, time.Hour)
	for seq := uint64(1); seq <= 10; seq++ {
		if err := w.Add(costBatch("n1", seq, 1000)); err != nil {
			t.Fatal(err)
		}
	}
	all, last, _ := w.After(0, func(*Entry) bool { return true })
	if len(all) != 3001 || all[0].Gap == nil || all[len(all)-1].Seq != last {
		t.Fatalf("After(0): %d entries ending at %d, want the evicted gap and 3000 ending at %d", len(all), all[len(all)-1].Seq, last)
	}
	all = all[1:]
	mid := all[1500].Seq
	after, _, _ := w.After(mid, func(*Entry) bool { return true })
	if len(after) != 1499 || after[0].Seq != mid+1 {
		t.Errorf("After(%d): %d entries from %d, want 1499 from %d", mid, len(after), after[0].Seq, mid+1)
	}
	behind, _, _ := w.After(1, func(*Entry) bool { return true })
	if len(behind) != 3001 || behind[0].Gap == nil || behind[0].Gap.Reason != GapEvicted {
		t.Errorf("a follower behind the eviction: %d entries, first %+v; want the evicted gap then 3000", len(behind), behind[0])
	}
}

// BenchmarkAddBatchFullWindow: a 1,000-flow batch into a full window
// of 100,000 entries.
func BenchmarkAddBatchFullWindow(b *testing.B) {
	w := fullWindow(b, 100_000)
	b.ResetTimer()
	for i := range b.N {
		if err := w.Add(costBatch("n1", uint64(i+1), 1000)); err != nil {
			b.Fatal(err)
		}
	}
}
