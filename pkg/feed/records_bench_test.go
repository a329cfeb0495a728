package feed_test

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// benchRunsEnv is how many start-up lists BenchmarkEndpointRecords makes
// in one process (each its own feed and records).
const benchRunsEnv = "ROUTED_FEED_BENCH_RUNS"

// BenchmarkEndpointRecords measures what a node holds after its start-up
// list once felix's policy model has made its record of every endpoint
// in the cluster: real etcd (another process) holding a big cluster
// written as routed writes it, the node feed listing it, and a consumer
// that does with the snapshot's endpoints what felix does
// (policy.EndpointFromAPI, Calc.SetEndpoint). The feed is then stopped
// and the snapshot dropped, so what stays is the records. Per run it
// reports the heap in use (pages holding objects: live records and the
// free slots beside them in the same spans) and the live heap after two
// collections, and the bytes allocated from the feed's start until the
// records were made, all per pod. Each run starts its own feed and
// records, the previous ones dropped.
//
//	GOGC=50 ROUTED_FEED_BENCH_PODS=150000 ROUTED_FEED_BENCH_RUNS=3 \
//	  go test ./pkg/feed -run '^$' -bench EndpointRecords -benchtime 1x -timeout 30m
//
// ROUTED_FEED_BENCH_PROFILES=<dir> writes each run's heap profile
// (records-<run>.pprof) with the records held.
func BenchmarkEndpointRecords(b *testing.B) {
	pods := envPods(b)
	runs := 1
	if v := os.Getenv(benchRunsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("%s=%q: want a number of runs >= 1", benchRunsEnv, v)
		}
		runs = n
	}
	profDir := os.Getenv(benchProfilesEnv)
	if profDir != "" {
		// Sample finely: the default (one sample per 512 KiB) cannot
		// tell apart records of a few dozen bytes.
		defer func(r int) { runtime.MemProfileRate = r }(runtime.MemProfileRate)
		runtime.MemProfileRate = 4096
	}
	ds := childEtcdClient(b)
	t0 := time.Now()
	writeBigCluster(b, ds, pods)
	b.Logf("wrote %d pods on %d nodes in %v", pods, pods/podsPerNode, time.Since(t0).Round(time.Millisecond))
	per := func(v uint64) float64 { return float64(v) / float64(pods) }
	for i := 0; i < b.N; i++ {
		for r := range runs {
			base := memStats()
			c := &recordsConsumer{node: benchNodeName(0), calc: policy.NewCalc(nopSink{}, policy.LogConfig{})}
			fd := feed.New(ds, feed.Options{})
			fd.Subscribe("felix", felixKinds, c)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			start := time.Now()
			go func() { _ = fd.Run(ctx); close(done) }()
			testenv.Eventually(b, 10*time.Minute, 5*time.Millisecond, func() string {
				if c.done.Load() == 0 {
					return "felix has not made its records yet"
				}
				return ""
			})
			ready := time.Since(start)
			allocated := memStats().TotalAlloc - base.TotalAlloc
			cancel()
			<-done
			fd = nil
			after := memStats()
			if c.endpoints != pods {
				b.Fatalf("run %d: %d endpoint records, want %d (refused: %d)", r, c.endpoints, pods, c.refused)
			}
			inuse, live := after.HeapInuse-base.HeapInuse, after.HeapAlloc-base.HeapAlloc
			b.Logf("run %d: %d records in %v; heap in use %.1f MiB (%.0f B/pod), live %.1f MiB (%.0f B/pod), allocated %.1f MiB (%.0f B/pod)",
				r, c.endpoints, ready.Round(time.Millisecond), mib(inuse), per(inuse), mib(live), per(live), mib(allocated), per(allocated))
			b.ReportMetric(per(inuse), "inuse-B/pod")
			b.ReportMetric(per(live), "live-B/pod")
			b.ReportMetric(per(allocated), "alloc-B/pod")
			profile(b, profDir, "records-"+strconv.Itoa(r))
			runtime.KeepAlive(c) // the records, held while measured
		}
	}
}

// envPods is the benchmarks' cluster size (benchPodsEnv; 30,000 pods
// unless set).
func envPods(b *testing.B) int {
	pods := 30000
	if v := os.Getenv(benchPodsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < podsPerNode {
			b.Fatalf("%s=%q: want a number of pods >= %d", benchPodsEnv, v, podsPerNode)
		}
		pods = n
	}
	return pods
}

// memStats reads the heap's figures after two collections.
func memStats() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms
}

// recordsConsumer makes felix's policy records of a snapshot's
// endpoints, as felix's policyReplace does with them.
type recordsConsumer struct {
	node      string
	calc      *policy.Calc
	endpoints int
	refused   int
	done      atomic.Int64
}

func (c *recordsConsumer) OnBatch(b feed.Batch) {
	if !b.Snapshot {
		return
	}
	for _, u := range b.Updates {
		w, ok := u.Resource.(*api.WorkloadEndpoint)
		if !ok {
			continue
		}
		ep, err := policy.EndpointFromAPI(w, w.Spec.Node == c.node)
		if err != nil {
			c.refused++
			continue
		}
		c.calc.SetEndpoint(ep)
		c.endpoints++
	}
	c.done.Store(1)
}

// nopSink takes the model's writes and keeps nothing.
type nopSink struct{}

func (nopSink) SetChain(string, []nftdp.Rule) error                { return nil }
func (nopSink) DeleteChain(string)                                 {}
func (nopSink) AddSet(string, nftdp.SetKind)                       {}
func (nopSink) DeleteSet(string)                                   {}
func (nopSink) AddMember(string, nftdp.Member)                     {}
func (nopSink) RemoveMember(string, nftdp.Member)                  {}
func (nopSink) SetEndpoint(string, string, string, nftdp.Families) {}
func (nopSink) DeleteEndpoint(string)                              {}
