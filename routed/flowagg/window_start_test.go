package flowagg

import (
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

// TestWindowFreshReaderSeesEvicted: a reader starting from nothing
// (seq 0) after the cap pushed entries out is told so first: a gap
// saying where the window begins and how many went; a follower that
// fell behind the same way gets the count of those it missed.
func TestWindowFreshReaderSeesEvicted(t *testing.T) {
	w := NewWindow(5, time.Hour)
	now := time.Now()
	for seq := uint64(1); seq <= 4; seq++ {
		b := flowrec.Batch{Node: "n1", Boot: "b", Seq: seq, Start: now, End: now}
		for i := range 3 {
			b.Flows = append(b.Flows, flowrec.Flow{End: now, DstPort: uint16(seq*10 + uint64(i)), Verdict: "allow"})
		}
		if err := w.Add(b); err != nil {
			t.Fatal(err)
		}
	}
	all := func(*Entry) bool { return true }
	// 13 entries so far (the aggregator-started gap, 12 flows); 5 kept.
	for _, tc := range []struct {
		seq  uint64
		want uint64
	}{{0, 8}, {3, 5}} {
		out, _, _ := w.After(tc.seq, all)
		if len(out) != 6 || out[0].Gap == nil || out[0].Gap.Reason != GapEvicted {
			t.Fatalf("after seq %d: %d entries, first %+v; want the evicted gap and the 5 held", tc.seq, len(out), out[0])
		}
		if g := out[0].Gap; g.Evicted != tc.want || !g.To.Equal(out[1].Received) {
			t.Errorf("after seq %d: gap %+v, want %d evicted and the window's start %v", tc.seq, *g, tc.want, out[1].Received)
		}
	}
	if out, _, _ := w.After(8, all); len(out) != 5 || out[0].Gap != nil {
		t.Errorf("after seq 8, the last evicted: %d entries, first a gap %v; want the 5 held", len(out), out[0].Gap)
	}
}
