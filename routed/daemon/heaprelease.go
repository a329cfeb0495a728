package daemon

import (
	"context"
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/sirupsen/logrus"
)

// releaseStartHeap returns the heap freed after start-up to the kernel
// once, as soon as the node is in sync (the feed listed; felix, when it
// runs, programmed the dataplane), then waits for ctx. Listing a big
// cluster and the first programming need several times the heap the
// node keeps (at 150,000 pods a peak of hundreds of MiB); Go's
// scavenger would hand that back over minutes, during which the pod's
// anonymous memory stays at the peak. One collection at that point is
// a fraction of a second of CPU.
func releaseStartHeap(ctx context.Context, inSync func() bool, log *logrus.Entry) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for !inSync() {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
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
