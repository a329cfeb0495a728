package daemon

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live  uint64
		floor int
		want  int
	}{
		{5 * mib, 25, 100},  // a small cluster's node: Go's default
		{0, 25, 100},        // nothing live yet
		{12 * mib, 25, 66},  // 8 MiB of headroom
		{16 * mib, 25, 50},  //
		{32 * mib, 25, 25},  // the floor from here on
		{110 * mib, 25, 25}, // a big cluster's node: as before
		{64 * mib, 10, 12},  // under a lower floor the headroom decides
		{5 * mib, 150, 150}, // a floor above the cap stands
		{1600 * mib, 0, 1},  // never 0 (a collection after every allocation)
	} {
		if got := gcPercentFor(c.live, c.floor); got != c.want {
			t.Errorf("live %d MiB, floor %d: GOGC %d, want %d", c.live/mib, c.floor, got, c.want)
		}
	}
}

// TestTuneGCFollowsLiveHeap: once tuning, GOGC follows the live heap
// after each collection: 64 MiB held keeps the floor (25), and once it
// is freed the percent rises (the test binary's own heap is a few MiB).
func TestTuneGCFollowsLiveHeap(t *testing.T) {
	t.Setenv("GOGC", "")
	prev := debug.SetGCPercent(25)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = byte(i)
	}
	tuneGC()
	gcUntil(t, "GOGC at the floor with 64 MiB live", func(p int) bool { return p == 25 })
	runtime.KeepAlive(held)
	held = nil
	gcUntil(t, "GOGC above the floor once the 64 MiB are freed", func(p int) bool { return p > 25 && p <= maxGCPercent })
}

// gcUntil collects until GOGC satisfies ok.
func gcUntil(t *testing.T, what string, ok func(int) bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		runtime.GC()
		if p := readGCPercent(); !ok(p) {
			return fmt.Sprintf("%s: GOGC %d, live heap %.1f MiB", what, p, float64(liveHeap())/(1<<20))
		}
		return ""
	})
}
