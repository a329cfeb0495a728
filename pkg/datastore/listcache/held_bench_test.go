package listcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkChangesHeld weighs MaxChanges at a 150,000-pod cluster's
// size: a file of 150,000 endpoints of 900 bytes and 171,509 other
// records of 300 (about 200 MB, scale-big's 321,509 keys), then
// scale-big's churn (100 new endpoints and 100 deletions a second, a
// relabel) until the changes pass the threshold. It reports, per
// threshold, the keys and the live heap the changes hold when the write
// is asked for (keys-held, MiB-held), the churn's seconds to get there
// (s-to-write; the write comes at most every Period, 3 min), and what
// that write costs unpaced: its time and its allocations (ms-write,
// MiB-alloc) and the CPU time of the process during it (ms-cpu).
//
//	go test -run XXX -bench ChangesHeld -benchtime 1x ./pkg/datastore/listcache
func BenchmarkChangesHeld(b *testing.B) {
	const eps, others = 150000, 171509
	epVal, otherVal := strings.Repeat("e", 900), strings.Repeat("o", 300)
	epKey := func(i int) string {
		return fmt.Sprintf("%sns-%04d/node-%04d-k8s-pod--%07d-eth0", epPart, i%2000, i%5000, i)
	}
	dir := b.TempDir()
	path := filepath.Join(dir, "cache")
	for _, maxChanges := range []int{4 << 20, 8 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("MaxChanges=%dMiB", maxChanges>>20), func(b *testing.B) {
			for range b.N {
				os.Remove(path)
				c, err := New(Options{Path: path, MaxChanges: maxChanges, WriteRate: -1})
				if err != nil {
					b.Fatal(err)
				}
				c.Load(prefix, parts, probeKey)
				kvs := []*mvccpb.KeyValue{kv(probeKey, "ci", 2)}
				for i := range eps {
					kvs = append(kvs, kv(epKey(i), epVal, 3))
				}
				for i := range others {
					kvs = append(kvs, kv(fmt.Sprintf("%spol-%07d", polPart, i), otherVal, 3))
				}
				list(c, kvs, 10, 1)
				kvs = nil
				if err := c.save(context.Background(), false); err != nil {
					b.Fatal(err)
				}
				var ms0, ms1 runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&ms0)
				rev, seconds := int64(10), 0
				for next := eps; c.changes.size <= maxChanges; seconds++ {
					evs := make([]*clientv3.Event, 0, 201)
					for range 100 {
						rev++
						evs = append(evs, putEv(epKey(next), epVal, rev))
						next++
					}
					for j := range 100 {
						rev++
						evs = append(evs, delEv(epKey((seconds*100+j)*7%eps), rev))
					}
					rev++
					evs = append(evs, putEv(epKey(seconds*13%eps), epVal, rev))
					c.Changed(evs, rev)
				}
				runtime.GC()
				runtime.ReadMemStats(&ms1)
				keys := len(c.changes.byKey)
				cpu0 := cpuTime()
				start := time.Now()
				if err := c.save(context.Background(), false); err != nil {
					b.Fatal(err)
				}
				took, cpu := time.Since(start), cpuTime()-cpu0
				var ms2 runtime.MemStats
				runtime.ReadMemStats(&ms2)
				b.ReportMetric(float64(keys), "keys-held")
				b.ReportMetric(float64(ms1.HeapAlloc-ms0.HeapAlloc)/(1<<20), "MiB-held")
				b.ReportMetric(float64(seconds), "s-to-write")
				b.ReportMetric(float64(took.Milliseconds()), "ms-write")
				b.ReportMetric(float64(cpu.Milliseconds()), "ms-cpu")
				b.ReportMetric(float64(ms2.TotalAlloc-ms1.TotalAlloc)/(1<<20), "MiB-alloc")
				c.changes.close()
			}
		})
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
