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

// TestTuneGCFollowsLiveHeap: tuning, GOGC follows the live heap after
// each collection, both ways: the test binary's few MiB get more than
// the floor, 64 MiB held brings it back to the floor (25), and freed
// it rises again. Stopped, the tuning leaves GOGC alone.
func TestTuneGCFollowsLiveHeap(t *testing.T) {
	prev := debug.SetGCPercent(25)
	stop := startTuning(25)
	t.Cleanup(func() { stop(); debug.SetGCPercent(prev) })
	above := func(p int) bool { return p > 25 && p <= maxGCPercent }
	gcUntil(t, "GOGC above the floor with a small heap", above)
	held := make([]byte, 64<<20)
	for i := range held {
		held[i] = byte(i)
	}
	gcUntil(t, "GOGC back at the floor with 64 MiB live", func(p int) bool { return p == 25 })
	runtime.KeepAlive(held)
	held = nil
	gcUntil(t, "GOGC above the floor again once the 64 MiB are freed", above)
	stop()
	debug.SetGCPercent(42)
	runtime.GC()
	runtime.GC()
	if p := readGCPercent(); p != 42 {
		t.Fatalf("GOGC %d after the tuning stopped, want the 42 set", p)
	}
}

// TestTuningFloor: the tuning's floor is the GOGC in force; GOGC in
// the environment (the operator's) or a collector turned off leave GOGC
// alone.
func TestTuningFloor(t *testing.T) {
	prev := debug.SetGCPercent(25)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	t.Setenv("GOGC", "")
	if floor, ok := tuningFloor(); !ok || floor != 25 {
		t.Fatalf("GOGC 25, none in the environment: floor %d, tuning %v; want 25, true", floor, ok)
	}
	debug.SetGCPercent(-1)
	if _, ok := tuningFloor(); ok {
		t.Fatal("collector off: tuning would turn it back on")
	}
	debug.SetGCPercent(25)
	t.Setenv("GOGC", "25")
	if _, ok := tuningFloor(); ok {
		t.Fatal("GOGC in the environment: tuning would override it")
	}
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
