package feed_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/datastore/listcache"
	"github.com/routed-net/routed/pkg/feed"
)

// The churn benchmark's knobs (environment): the collector settings to
// alternate ("50,25": GOGC 50, then 25; "50+limit": GOGC 50 under a
// memory limit of the idle figure plus 10 %), how long each churns and
// how many pod writes a second; where heap dumps go (debug.WriteHeapDump
// after a collection, idle and after each churn; none when unset).
const (
	churnGCEnv   = "ROUTED_FEED_BENCH_GC"
	churnTimeEnv = "ROUTED_FEED_BENCH_CHURN"
	churnRateEnv = "ROUTED_FEED_BENCH_RATE"
	heapDumpEnv  = "ROUTED_FEED_BENCH_HEAPDUMPS"
	// recordsEnv "after-gc": the snapshot's endpoints are all converted
	// (policy.EndpointFromAPI) first, then a collection, then their
	// records are made; unset, each is converted and made in turn, as
	// felix's policyReplace does.
	recordsEnv = "ROUTED_FEED_BENCH_RECORDS"
)

// BenchmarkChurnHeld takes apart what a node's heap holds from the
// kernel under cluster-wide churn against what it holds idle (issue 36:
// scale-big's nodes at 149-153 MiB idle, 190-211 MiB after 4 minutes of
// churn). One feed with the daemon's cache and felix's records of every
// endpoint (the records follow the churn, as felix's do), on real etcd
// in another process; then, per collector setting in turn (alternated,
// each repeated): the heap returned to the kernel (as the daemon does
// once in sync), the idle figures, a churn of relabels and
// delete-and-recreates at a steady rate, and the figures sampled every
// 100 ms during it: heap held (pages with objects, free pages not yet
// returned) and their parts, and the collector's cycles and CPU. The
// churn's writes are made from this process: their garbage counts too.
// With heapDumpEnv set, a census of the heap dump after a collection,
// per object size, says which sizes keep pages in use for few objects.
//
//	ROUTED_FEED_BENCH_PODS=50000 ROUTED_FEED_BENCH_GC=50,25,50,25 \
//	  go test ./pkg/feed -run '^$' -bench ChurnHeld -benchtime 1x -timeout 30m -v
func BenchmarkChurnHeld(b *testing.B) {
	pods := envPods(b)
	settings := strings.Split(cmpEnv(churnGCEnv, "50,25,50+limit,50,25,50+limit"), ",")
	dur, err := time.ParseDuration(cmpEnv(churnTimeEnv, "60s"))
	if err != nil {
		b.Fatal(err)
	}
	rate, err := strconv.Atoi(cmpEnv(churnRateEnv, "100"))
	if err != nil || rate < 1 {
		b.Fatalf("%s: want pod writes a second >= 1", churnRateEnv)
	}
	if os.Getenv(heapDumpEnv) != "" {
		runtime.MemProfileRate = 512
	}
	ds := childEtcdClient(b)
	writeBigCluster(b, ds, pods)
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))

	for i := 0; i < b.N; i++ {
		c, err := listcache.New(listcache.Options{Path: filepath.Join(b.TempDir(), "feed-cache")})
		if err != nil {
			b.Fatal(err)
		}
		fx := &churnRecords{node: benchNodeName(0), calc: policy.NewCalc(nopSink{}, policy.LogConfig{}),
			afterGC: os.Getenv(recordsEnv) == "after-gc"}
		fd := feed.New(ds, feed.Options{Cache: c})
		fd.Subscribe("felix", felixKinds, fx)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = fd.Run(ctx); close(done) }()
		testenv.Eventually(b, 10*time.Minute, 5*time.Millisecond, func() string {
			if fx.rev.Load() == 0 {
				return "felix has no snapshot yet"
			}
			return ""
		})
		b.Logf("felix holds %d endpoint records", fx.endpoints.Load())
		next := 0
		for _, s := range settings {
			gogc, limited := strings.CutSuffix(s, "+limit")
			g, err := strconv.Atoi(gogc)
			if err != nil {
				b.Fatalf("%s: %q is not GOGC[+limit]", churnGCEnv, s)
			}
			debug.SetMemoryLimit(math.MaxInt64)
			debug.SetGCPercent(g)
			debug.FreeOSMemory()
			idle := readHeld()
			heapDump(b, fmt.Sprintf("%d-%s-idle", i, s))
			if limited {
				debug.SetMemoryLimit(int64(float64(idle.total) * 1.1))
			}
			during := sampleHeld(func() { next = churnAt(b, ds, fx, pods, next, rate, dur) })
			debug.SetMemoryLimit(math.MaxInt64)
			after := readHeld()
			heapDump(b, fmt.Sprintf("%d-%s-after", i, s))
			b.Logf("%-9s idle: held %.1f MiB (in use %.1f, live %.1f), total %.1f | churn (%d writes/s, %v, %.1f MiB/s allocated): held mean %.1f max %.1f end %.1f MiB, total mean %.1f max %.1f; in use mean %.1f, free not returned mean %.1f; %d GCs, GC CPU %.1f ms/s",
				s, mib(idle.held()), mib(idle.inuse), mib(idle.objects), mib(idle.total),
				rate, dur, mib(after.alloc-idle.alloc)/dur.Seconds(),
				during.mean(func(h held) uint64 { return h.held() }), during.max(func(h held) uint64 { return h.held() }), mib(after.held()),
				during.mean(func(h held) uint64 { return h.total }), during.max(func(h held) uint64 { return h.total }),
				during.mean(func(h held) uint64 { return h.inuse }), during.mean(func(h held) uint64 { return h.free }),
				after.cycles-idle.cycles, 1000*(after.gcCPU-idle.gcCPU)/dur.Seconds())
			b.ReportMetric(during.mean(func(h held) uint64 { return h.held() })-mib(idle.held()), "growth-MiB-"+s)
		}
		cancel()
		<-done
	}
}

// heapDump writes the heap after a collection to heapDumpEnv's
// directory as name.heapdump, when set, and a heap profile beside it
// (every 512th byte allocated sampled from the benchmark's start).
func heapDump(b *testing.B, name string) {
	dir := os.Getenv(heapDumpEnv)
	if dir == "" {
		return
	}
	profile(b, dir, name)
	runtime.GC()
	f, err := os.Create(filepath.Join(dir, name+".heapdump"))
	if err != nil {
		b.Fatal(err)
	}
	debug.WriteHeapDump(f.Fd())
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	cs, err := heapCensus(f.Name())
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: %s", name, censusText(cs, 5))
}

func cmpEnv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// held is the runtime's account of the heap at one time.
type held struct {
	objects, unused, free, total, alloc, cycles uint64
	inuse                                       uint64 // objects + unused: pages holding objects
	gcCPU                                       float64
}

// held is what the heap holds from the kernel: pages with objects and
// free pages not yet returned.
func (h held) held() uint64 { return h.inuse + h.free }

func readHeld() held {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"}, {Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"}, {Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	h := held{objects: s[0].Value.Uint64(), unused: s[1].Value.Uint64(), free: s[2].Value.Uint64(),
		total: s[3].Value.Uint64() - s[4].Value.Uint64(), alloc: s[5].Value.Uint64(), cycles: s[6].Value.Uint64(),
		gcCPU: s[7].Value.Float64()}
	h.inuse = h.objects + h.unused
	return h
}

// heldSamples are readHeld's figures every 100 ms.
type heldSamples []held

func sampleHeld(f func()) heldSamples {
	var out heldSamples
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				out = append(out, readHeld())
			}
		}
	}()
	f()
	close(quit)
	<-done
	return out
}

func (s heldSamples) mean(v func(held) uint64) float64 {
	var sum float64
	for _, h := range s {
		sum += float64(v(h))
	}
	return sum / float64(max(len(s), 1)) / (1 << 20)
}

func (s heldSamples) max(v func(held) uint64) float64 {
	var m uint64
	for _, h := range s {
		m = max(m, v(h))
	}
	return mib(m)
}

// churnAt writes pod changes at rate a second for d, from the next'th
// (alternately a relabel and a delete followed by a re-create), then
// waits for felix to have them; it returns where the next churn starts.
func churnAt(b *testing.B, ds *datastore.Client, fx *churnRecords, pods, next, rate int, d time.Duration) int {
	b.Helper()
	ctx := context.Background()
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	var last int64
	for end := time.Now().Add(d); time.Now().Before(end); next++ {
		<-t.C
		w := benchPod((next * 7919) % pods).wep()
		key, val, err := datastore.Encode(w)
		if err != nil {
			b.Fatal(err)
		}
		ops := []clientv3.Op{clientv3.OpPut(key, string(val))}
		if next%2 == 0 {
			w.Metadata.Labels["churn"] = strconv.Itoa(next)
			if _, val, err = datastore.Encode(w); err != nil {
				b.Fatal(err)
			}
			ops = []clientv3.Op{clientv3.OpPut(key, string(val))}
		} else {
			ops = append([]clientv3.Op{clientv3.OpDelete(key)}, ops...)
		}
		for _, op := range ops { // a delete and a put of one key cannot share a transaction
			resp, err := ds.Etcd().Txn(ctx).Then(op).Commit()
			if err != nil {
				b.Fatal(err)
			}
			last = resp.Header.Revision
		}
	}
	testenv.Eventually(b, 5*time.Minute, 5*time.Millisecond, func() string {
		if r := fx.rev.Load(); r < last {
			return fmt.Sprintf("felix at %d, churn wrote %d", r, last)
		}
		return ""
	})
	return next
}

// churnRecords keeps felix's policy records of every endpoint, from the
// snapshot and then from each change, as felix's policy loop does.
type churnRecords struct {
	node      string
	afterGC   bool // recordsEnv
	calc      *policy.Calc
	endpoints atomic.Int64
	rev       atomic.Int64
}

func (c *churnRecords) OnBatch(b feed.Batch) {
	if b.Snapshot && c.afterGC {
		c.snapshotAfterGC(b)
		return
	}
	for _, u := range b.Updates {
		if u.Kind != api.KindWorkloadEndpoint {
			continue
		}
		if u.Deleted {
			c.calc.DeleteEndpoint(u.Name)
			continue
		}
		w, ok := u.Resource.(*api.WorkloadEndpoint)
		if !ok {
			continue
		}
		ep, err := policy.EndpointFromAPI(w, w.Spec.Node == c.node)
		if err != nil {
			continue
		}
		c.calc.SetEndpoint(ep)
		if b.Snapshot {
			c.endpoints.Add(1)
		}
	}
	c.rev.Store(b.Revision)
}

// snapshotAfterGC makes the records of a snapshot's endpoints once they
// are all converted and the conversion's garbage is collected (the
// batch itself stays referenced, as felix's replace holds it): the
// records' small objects then fill whole pages instead of sitting
// among that garbage.
func (c *churnRecords) snapshotAfterGC(b feed.Batch) {
	var eps []policy.Endpoint
	for _, u := range b.Updates {
		if w, ok := u.Resource.(*api.WorkloadEndpoint); ok {
			if ep, err := policy.EndpointFromAPI(w, w.Spec.Node == c.node); err == nil {
				eps = append(eps, ep)
			}
		}
	}
	runtime.GC()
	for _, ep := range eps {
		c.calc.SetEndpoint(ep)
	}
	c.endpoints.Add(int64(len(eps)))
	c.rev.Store(b.Revision)
}
