package daemon

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
)

// gcHeadroom is the least heap growth the steady collector allows
// between collections. The steady GOGC (routed/cmd/routed's 25) is set
// for a big cluster's node, whose live heap is 100 MiB and more: a
// quarter of it is tens of MiB. A small cluster's node holds 5 MiB live,
// and a quarter of that is a collection every 1.25 MiB allocated: the
// 100-node `make scale` lab spent about a quarter of each node's CPU in
// the collector while pods started (CPU profile through `routedctl
// node profile cpu`), on a machine whose CPUs were the claim-to-FIB
// path's bottleneck. With this headroom (2026-12-01, alternated runs
// on that lab): claim -> every FIB p50 214-249 ms and p99 757-784 ms
// against 511-519 and 1,236-1,616 ms, for 1 MiB more anonymous memory
// per node (10.1-10.2 MiB against 9.1) and 6 MiB more per route
// reflector (20-22 against 15). A big cluster's node is unchanged.
const gcHeadroom = 8 << 20

// maxGCPercent caps the GOGC tuneGC sets: Go's default.
const maxGCPercent = 100

// gcPercentFor is the GOGC that lets the heap grow by gcHeadroom over
// live, at least floor (and 1: 0 collects all the time) and at most
// maxGCPercent.
func gcPercentFor(live uint64, floor int) int {
	floor = max(floor, 1)
	if floor >= maxGCPercent {
		return floor
	}
	if live == 0 {
		return maxGCPercent
	}
	return min(max(int(gcHeadroom*100/live), floor), maxGCPercent)
}

var tuning sync.Once

// tuneGC keeps GOGC at gcPercentFor(the live heap, the GOGC in force
// now) after every collection, for the life of the process: a big
// heap's percent stays, a small one's grows towards Go's default. The
// daemon starts it once in sync (or once the start-up GOGC's time is
// up, releaseStartHeap). It does nothing when the environment sets GOGC
// (the operator's choice stands) or the collector is off, and runs
// once however often it is called.
func tuneGC() {
	if floor, ok := tuningFloor(); ok {
		tuning.Do(func() { startTuning(floor) })
	}
}

// tuningFloor is the floor tuneGC tunes above, and whether it tunes:
// not with GOGC in the environment, nor with the collector off.
func tuningFloor() (int, bool) {
	if os.Getenv("GOGC") != "" {
		return 0, false
	}
	floor := readGCPercent()
	return floor, floor > 0
}

// startTuning sets GOGC from the live heap after every collection, with
// floor, until stop is called.
func startTuning(floor int) (stop func()) {
	var stopped atomic.Bool
	var arm func()
	arm = func() {
		// A finalizer runs after the collection that found its object
		// unreachable: once per cycle, re-armed each time.
		runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
			if stopped.Load() {
				return
			}
			// The percent in force is read, not remembered: one set
			// by anything else is corrected too.
			if want := gcPercentFor(liveHeap(), floor); want != readGCPercent() {
				debug.SetGCPercent(want)
			}
			arm()
		})
	}
	arm()
	return func() { stopped.Store(true) }
}

// gcSentinel is big enough not to share a tiny-allocator block (whose
// finalizer would wait for its neighbours).
type gcSentinel struct{ _ [32]byte }

func liveHeap() uint64 { return readUint64("/gc/heap/live:bytes") }

func readGCPercent() int { return int(readUint64("/gc/gogc:percent")) }

func readUint64(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
