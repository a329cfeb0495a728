package daemon

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/supervise"
)

// startGCPercent is the collector's GOGC from the daemon's start until
// the node is in sync, when the steady one (routed/cmd/routed's 25) is
// put back. The start-up list and the first programming allocate about
// 7 KB a pod in the cluster, most of it garbage, while the node's
// long-lived state grows among it: a collection every 20 % of the live
// heap instead of 50 % keeps the heap's peak near the live heap
// (BenchmarkFeedMemory, pkg/feed, 60,000 pods, real etcd, 2026-11-29:
// peak heap during the list 151.5-156.8 MiB at 50 against 119.8-120.3
// MiB at 20, ready 3.2-3.8 s against 3.9-4.1 s) and leaves fewer
// pages pinned by a few survivors among the list's garbage once it is
// freed.
const startGCPercent = 20

// startGCLimit is how long the start-up GOGC lasts at most.
var startGCLimit = 5 * time.Minute

// lowerGCForStart sets startGCPercent unless the environment sets GOGC
// (the operator's choice stands), and returns what puts the previous
// one back, once, however often it is called.
func lowerGCForStart() (restore func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	prev := debug.SetGCPercent(startGCPercent)
	var once sync.Once
	return func() { once.Do(func() { debug.SetGCPercent(prev) }) }
}

// releaseStartHeap returns the heap freed after start-up to the kernel
// once, as soon as the node is in sync (the feed listed; felix, when it
// runs, programmed the dataplane), then waits for ctx. Listing a big
// cluster and the first programming need several times the heap the
// node keeps (at 150,000 pods a peak of hundreds of MiB); Go's
// scavenger would hand that back over minutes, during which the pod's
// anonymous memory stays at the peak. One collection at that point is
// a fraction of a second of CPU. restoreGC puts the steady GOGC back
// (lowerGCForStart) just before.
func releaseStartHeap(ctx context.Context, inSync func() bool, restoreGC func(), log *logrus.Entry) error {
	// A node that is not in sync within startGCLimit (etcd lost after
	// registration, a dataplane that keeps failing) gets the steady
	// GOGC back meanwhile: the low one costs collections, and the
	// start-up list it was for is over by then.
	limit, stop := context.WithTimeout(ctx, startGCLimit)
	synced := supervise.Until(limit, time.Second, inSync)
	stop()
	restoreGC()
	if !synced {
		if ctx.Err() != nil {
			return nil
		}
		log.WithField("after", startGCLimit).Info("not in sync yet: the steady GOGC is back; the start-up heap is returned once in sync")
		if !supervise.Until(ctx, time.Second, inSync) {
			return nil
		}
	}
	before := heapHeld()
	began := time.Now()
	debug.FreeOSMemory()
	after := heapHeld()
	log.WithFields(logrus.Fields{
		"heldBefore": mib(before), "heldAfter": mib(after),
		"took": time.Since(began).Round(time.Millisecond),
	}).Info("in sync: returned the start-up heap to the kernel")
	<-ctx.Done()
	return nil
}

// heapHeld is the heap memory the process holds from the kernel (in
// use, free but not yet returned, and the heap's own metadata), bytes.
func heapHeld() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	var sum uint64
	for _, x := range s {
		if x.Value.Kind() == metrics.KindUint64 {
			sum += x.Value.Uint64()
		}
	}
	return sum
}

// mib formats bytes as MiB for the log.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
