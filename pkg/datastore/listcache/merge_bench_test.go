package listcache

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// BenchmarkMergeWrite measures what one write of the changes costs the
// heap: a file of 40,000 endpoints of about 1 KiB (a fifth of a
// 150,000-pod cluster's file) merged with 1,000 changed endpoints, the
// file read the way it was before issue 36's churn profiles (a copy of
// every record: "copy") and now (one pair of buffers: "reuse"), side by
// side. B/op is what a write allocates; gc/op the collections it
// causes at GOGC=50 (routed's) with the rest of the heap small.
//
//	go test -run XXX -bench MergeWrite -benchtime 10x ./pkg/datastore/listcache
func BenchmarkMergeWrite(b *testing.B) {
	const records, changed = 40000, 1000
	val := strings.Repeat("v", 1000)
	for _, mode := range []string{"copy", "reuse"} {
		b.Run(mode, func(b *testing.B) {
			c, err := New(Options{Path: filepath.Join(b.TempDir(), "cache"), WriteRate: -1})
			if err != nil {
				b.Fatal(err)
			}
			c.mergeCopies = mode == "copy"
			c.Load(prefix, parts, probeKey) // none yet: sets the range
			kvs := []*mvccpb.KeyValue{kv(probeKey, "ci", 2)}
			for i := range records {
				kvs = append(kvs, kv(fmt.Sprintf("%sns-%04d/pod-%06d", epPart, i%2000, i), val, 3))
			}
			list(c, kvs, 10, 1)
			if err := c.save(context.Background(), false); err != nil {
				b.Fatal(err)
			}
			kvs = nil
			rev := int64(10)
			var ms0, ms1 runtime.MemStats
			b.ReportAllocs()
			b.ResetTimer()
			runtime.ReadMemStats(&ms0)
			for i := range b.N {
				b.StopTimer()
				evs := make([]*clientv3.Event, 0, changed)
				for j := range changed {
					rev++
					k := (i*changed + j) * 37 % records
					evs = append(evs, putEv(fmt.Sprintf("%sns-%04d/pod-%06d", epPart, k%2000, k), val, rev))
				}
				c.Changed(evs, rev)
				b.StartTimer()
				if err := c.save(context.Background(), false); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(ms1.NumGC-ms0.NumGC)/float64(b.N), "gc/op")
		})
	}
}
