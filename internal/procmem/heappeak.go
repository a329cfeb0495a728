package procmem

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// HeapDuring runs f and returns the most heap this process had in use
// while f ran, above what was live before it, and the bytes allocated
// meanwhile. The heap is sampled every millisecond with the collector at
// GOGC=10, so that garbage adds little: the peak is close to what f held
// at once. Meant for a process that runs nothing else (a benchmark's
// child process): everything allocated meanwhile counts.
func HeapDuring(f func()) (peak, allocated uint64) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	runtime.GC()
	metrics.Read(s)
	base, alloc0 := s[0].Value.Uint64(), s[1].Value.Uint64()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		high := base
		one := s[:1:1]
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(one)
			high = max(high, one[0].Value.Uint64())
			select {
			case <-stop:
				done <- high
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	high := <-done
	metrics.Read(s)
	return high - base, s[1].Value.Uint64() - alloc0
}
