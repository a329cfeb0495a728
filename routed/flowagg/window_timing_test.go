//go:build !race

package flowagg

import (
	"testing"
	"time"
)

// The timing comparison runs without the race detector only: under it
// (and the GC it slows) times say nothing about the window's own cost.

// addCost is the least time of five adds of a 1,000-flow batch.
func addCost(t *testing.T, w *Window, seq0 uint64) time.Duration {
	best := time.Hour
	for i := range uint64(5) {
		b := costBatch("n1", seq0+i, 1000)
		start := time.Now()
		if err := w.Add(b); err != nil {
			t.Fatal(err)
		}
		best = min(best, time.Since(start))
	}
	return best
}

// TestWindowFullCostsAsEmpty: a batch into a full window (each record
// evicting the oldest) costs about what it costs into an empty one:
// eviction is not a shift of the whole buffer per record.
func TestWindowFullCostsAsEmpty(t *testing.T) {
	empty := addCost(t, NewWindow(100_000, time.Hour), 1)
	w := fullWindow(t, 100_000)
	full := addCost(t, w, 1)
	t.Logf("a 1,000-flow batch: %v into an empty window, %v into a full one", empty, full)
	if full > 10*empty+50*time.Millisecond { // loose for a loaded machine: the shift took 0.8-1.9 s
		t.Errorf("a 1,000-flow batch into a full window took %v, into an empty one %v", full, empty)
	}
	if n, evicted := w.Stats(); n != 100_000 || evicted == 0 {
		t.Errorf("the full window holds %d entries (evicted %d), want 100000 and some evicted", n, evicted)
	}
}
