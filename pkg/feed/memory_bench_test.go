package feed_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/datastore/listcache"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
)

// The memory benchmark's knobs (environment): how many pods the cluster
// holds, and where heap profiles go (none when unset).
const (
	benchPodsEnv     = "ROUTED_FEED_BENCH_PODS"
	benchProfilesEnv = "ROUTED_FEED_BENCH_PROFILES"
)

// Per the big cluster's shape (150,000 pods on 5,000 nodes in 2,000
// namespaces): pods per node, and pods per namespace.
const (
	podsPerNode = 30
	podsPerNS   = 75
)

// felixKinds are the kinds felix subscribes to (felix.SyncKinds with
// affinities and borrowed addresses), not imported: felix imports feed.
var felixKinds = []api.Kind{api.KindIPPool, api.KindNode, api.KindWorkloadEndpoint, api.KindTier,
	api.KindNetworkPolicy, api.KindGlobalNetworkPolicy, api.KindProfile, api.KindNetworkSet,
	api.KindGlobalNetworkSet, api.KindServiceEndpoints, api.KindHostEndpoint, api.KindStagedNetworkPolicy,
	api.KindStagedGlobalNetworkPolicy, feed.KindAffinity, feed.KindBorrowed}

// BenchmarkFeedMemory measures what the node feed holds at a big
// cluster's size, on real etcd (in another process, so that this heap
// is the feed's): the cluster written as routed writes it (Node records,
// blocks and handles through the IPAM client's import, WorkloadEndpoints
// with Kubernetes' identity labels, profiles and named ports through
// datastore.Encode, namespace profiles), the daemon's subscriptions
// (felix every endpoint, undecoded in its snapshots as felix takes them,
// confd and the journal their own node's), then:
// the peak heap during the list and the live heap when felix is handed
// its snapshot; the heap the feed keeps once every consumer has its
// snapshot and the cache file is written, and after churn; the same on a
// restart from the cache. Every figure is per pod in the cluster. The
// peak is sampled (heap objects, live or not yet swept, every
// millisecond), so it depends on the collector's pace: run it with
// routed's GOGC (50, routed/cmd/routed) to compare with the daemon.
//
//	GOGC=50 ROUTED_FEED_BENCH_PODS=50000 ROUTED_FEED_BENCH_PROFILES=/tmp/feedprof \
//	  go test ./pkg/feed -run '^$' -bench FeedMemory -benchtime 1x -timeout 30m
func BenchmarkFeedMemory(b *testing.B) {
	pods := envPods(b)
	profDir := os.Getenv(benchProfilesEnv)
	ds := childEtcdClient(b)
	t0 := time.Now()
	writeBigCluster(b, ds, pods)
	b.Logf("wrote %d pods on %d nodes in %v", pods, pods/podsPerNode, time.Since(t0).Round(time.Millisecond))
	cachePath := filepath.Join(b.TempDir(), "feed-cache")
	per := func(v uint64) float64 { return float64(v) / float64(pods) }

	for i := 0; i < b.N; i++ {
		_ = os.Remove(cachePath)
		base := liveHeap()

		// Start: a list.
		run := startMemFeed(b, ds, cachePath, profDir, "list")
		b.Logf("list: ready in %v, peak heap %.1f MiB (%.0f B/pod), live at felix's snapshot %.1f MiB (%.0f B/pod)",
			run.ready.Round(time.Millisecond), mib(run.peak-base), per(run.peak-base), mib(run.atSnapshot-base), per(run.atSnapshot-base))
		b.ReportMetric(per(run.peak-base), "peak-list-B/pod")
		b.ReportMetric(per(run.atSnapshot-base), "live-at-snapshot-list-B/pod")
		waitCacheWritten(b, run.fd, cachePath)
		steady := liveHeap() - base
		profile(b, profDir, "steady-list")
		b.Logf("after the list, cache written: the feed keeps %.1f MiB (%.0f B/pod)", mib(steady), per(steady))
		b.ReportMetric(per(steady), "kept-B/pod")

		churn(b, ds, run, pods, pods/3)
		churned := liveHeap() - base
		profile(b, profDir, "steady-churn")
		b.Logf("after %d pod changes: the feed keeps %.1f MiB (%.0f B/pod)", pods/3, mib(churned), per(churned))
		b.ReportMetric(per(churned), "kept-churn-B/pod")
		run.stop()

		// Restart: from the cache the stop wrote.
		base = liveHeap()
		run = startMemFeed(b, ds, cachePath, profDir, "restart")
		b.Logf("restart from the cache: ready in %v, peak heap %.1f MiB (%.0f B/pod), live at felix's snapshot %.1f MiB (%.0f B/pod)",
			run.ready.Round(time.Millisecond), mib(run.peak-base), per(run.peak-base), mib(run.atSnapshot-base), per(run.atSnapshot-base))
		b.ReportMetric(per(run.peak-base), "peak-restart-B/pod")
		b.ReportMetric(per(run.atSnapshot-base), "live-at-snapshot-restart-B/pod")
		if !metricsHave(b, run.fd, `routed_feed_lists_total{reason="cache"} 1`) {
			b.Fatal("the restart did not start from the cache")
		}
		restarted := liveHeap() - base
		b.Logf("after the restart: the feed keeps %.1f MiB (%.0f B/pod)", mib(restarted), per(restarted))
		b.ReportMetric(per(restarted), "kept-restart-B/pod")
		run.stop()
	}
}

func mib(v uint64) float64 { return float64(v) / (1 << 20) }

// liveHeap is the heap's live bytes, after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func profile(tb testing.TB, dir, name string) {
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		tb.Fatal(err)
	}
}

// memRun is one feed started for the benchmark.
type memRun struct {
	fd         *feed.Feed
	felix      *memConsumer
	ready      time.Duration
	peak       uint64 // the largest heap (objects, live or not yet swept) until every consumer had its snapshot
	atSnapshot uint64 // the live heap while felix held its snapshot
	stop       func()
}

// startMemFeed starts a feed with the daemon's subscriptions and returns
// once every consumer has its snapshot.
func startMemFeed(b *testing.B, ds *datastore.Client, cachePath, profDir, phase string) *memRun {
	b.Helper()
	c, err := listcache.New(listcache.Options{Path: cachePath})
	if err != nil {
		b.Fatal(err)
	}
	run := &memRun{fd: feed.New(ds, feed.Options{Cache: c})}
	own := feed.OnlyNames(api.KindWorkloadEndpoint, func(name string) bool {
		return api.IsNodeWorkloadEndpointName(name, benchNodeName(0))
	})
	var atSnapshot atomic.Uint64
	run.felix = &memConsumer{onSnapshot: func(feed.Batch) {
		atSnapshot.Store(liveHeap())
		profile(b, profDir, phase+"-at-snapshot")
	}}
	subs := []*memConsumer{run.felix}
	sub := func(name string, kinds []api.Kind, c *memConsumer, opts ...feed.SubOption) {
		if c == nil {
			c = &memConsumer{}
			subs = append(subs, c)
		}
		run.fd.Subscribe(name, kinds, c, opts...)
	}
	sub("felix", felixKinds, run.felix, feed.Undecoded(api.KindWorkloadEndpoint), feed.ReportUnreadable(api.KindWorkloadEndpoint))
	sub("confd", []api.Kind{api.KindNode, api.KindBGPConfiguration, api.KindBGPPeer, api.KindBGPFilter, api.KindIPPool,
		api.KindWorkloadEndpoint, api.KindProfile}, nil, own)
	sub("node record keeper", []api.Kind{api.KindNode}, nil)
	sub("bgp", []api.Kind{api.KindNode, api.KindBGPConfiguration, api.KindBGPPeer, api.KindBGPFilter, api.KindIPPool,
		feed.KindAffinity, feed.KindBorrowed}, nil)
	sub("endpoint journal", []api.Kind{api.KindWorkloadEndpoint}, nil, own)
	sub("tunnel address", []api.Kind{api.KindIPPool, api.KindNode}, nil)
	sub("wireguard keys", []api.Kind{api.KindNode}, nil)
	sub("cni socket", []api.Kind{api.KindIPPool, api.KindIPAMConfiguration, api.KindNode, api.KindIPReservation}, nil)

	sampler := startHeapSampler()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { _ = run.fd.Run(ctx); close(done) }()
	testenv.Eventually(b, 5*time.Minute, 5*time.Millisecond, func() string {
		for _, s := range subs {
			if s.snapshots.Load() == 0 {
				return "a consumer has no snapshot yet"
			}
		}
		return ""
	})
	run.ready = time.Since(start)
	run.peak = sampler.stop()
	run.atSnapshot = atSnapshot.Load()
	var once sync.Once
	run.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(time.Minute):
				b.Error("the feed did not stop")
			}
		})
	}
	b.Cleanup(run.stop)
	return run
}

// memConsumer takes batches and keeps nothing of them; felix's takes a
// snapshot's endpoints undecoded, as felix does, and decodes them.
type memConsumer struct {
	onSnapshot func(feed.Batch)
	snapshots  atomic.Int64
	rev        atomic.Int64
}

func (c *memConsumer) OnBatch(b feed.Batch) {
	if b.Snapshot && c.onSnapshot != nil {
		c.onSnapshot(b)
	}
	// Decoded a chunk at a time, as felix does, and dropped.
	feed.DecodeEach(b.Encoded, func(api.Resource) {})
	if b.Snapshot {
		c.snapshots.Add(1)
	}
	c.rev.Store(b.Revision)
}

// heapSampler keeps the largest heap it sees (objects live or not yet
// swept: what the process holds), read every millisecond.
type heapSampler struct {
	peak atomic.Uint64
	quit chan struct{}
	done chan struct{}
}

func startHeapSampler() *heapSampler {
	s := &heapSampler{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > s.peak.Load() {
				s.peak.Store(v)
			}
			select {
			case <-s.quit:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *heapSampler) stop() uint64 {
	close(s.quit)
	<-s.done
	return s.peak.Load()
}

// waitCacheWritten waits for the cache's first write of the list.
func waitCacheWritten(b *testing.B, fd *feed.Feed, path string) {
	b.Helper()
	testenv.Eventually(b, 5*time.Minute, 20*time.Millisecond, func() string {
		if !metricsHave(b, fd, "routed_feed_cache_writes_total 1") {
			return "the cache is not written yet"
		}
		return ""
	})
}

func metricsHave(tb testing.TB, fd *feed.Feed, want string) bool {
	return containsLine(metricsText(tb, fd), want)
}

// churn makes n changes to the cluster's endpoints (relabels, and
// deletes each followed by a re-create), as pods come and go, and waits
// until felix has them.
func churn(b *testing.B, ds *datastore.Client, run *memRun, pods, n int) {
	b.Helper()
	ctx := context.Background()
	var last int64
	for i := 0; i < n; i += txnOps {
		var ops []clientv3.Op
		for j := i; j < min(i+txnOps, n); j++ {
			p := benchPod((j * 7919) % pods)
			w := p.wep()
			if j%2 == 0 {
				w.Metadata.Labels["churn"] = strconv.Itoa(j)
			} else {
				ops = append(ops, clientv3.OpDelete(datastore.Key(api.KindWorkloadEndpoint, w.Metadata.Name)))
			}
			key, val, err := datastore.Encode(w)
			if err != nil {
				b.Fatal(err)
			}
			ops = append(ops, clientv3.OpPut(key, string(val)))
		}
		// A delete and a put of one key cannot share a transaction.
		for _, op := range ops {
			resp, err := ds.Etcd().Txn(ctx).Then(op).Commit()
			if err != nil {
				b.Fatal(err)
			}
			last = resp.Header.Revision
		}
	}
	testenv.Eventually(b, 5*time.Minute, 5*time.Millisecond, func() string {
		if r := run.felix.rev.Load(); r < last {
			return fmt.Sprintf("felix at %d, churn wrote %d", r, last)
		}
		return ""
	})
}

// txnOps is how many writes one transaction of the benchmark carries
// (etcd's default limit is 128).
const txnOps = 100

func benchNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// benchPodT is pod g of the cluster: on node g/podsPerNode, in
// namespace g/podsPerNS, at address g of 10.0.0.0/8 (one /26 block per
// node).
type benchPodT struct{ g int }

func benchPod(g int) benchPodT { return benchPodT{g} }

func (p benchPodT) node() string { return benchNodeName(p.g / podsPerNode) }
func (p benchPodT) ns() string   { return fmt.Sprintf("ns-%04d", p.g/podsPerNS) }
func (p benchPodT) name() string {
	app := p.g % 5
	return fmt.Sprintf("app-%d-%08x-%05x", app, uint32(p.g/podsPerNS*5+app)*2654435761, p.g)
}
func (p benchPodT) cid() string { return fmt.Sprintf("%064x", uint64(p.g)*0x9e3779b97f4a7c15) }
func (p benchPodT) block() netip.Prefix {
	n := p.g / podsPerNode
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 10), byte(n >> 2), byte(n << 6)}), 26)
}
func (p benchPodT) addr() netip.Addr {
	a := p.block().Addr().As4()
	a[3] += byte(p.g % podsPerNode)
	return netip.AddrFrom4(a)
}

// wep is the pod's WorkloadEndpoint as routed-cni writes it for a
// Kubernetes pod.
func (p benchPodT) wep() *api.WorkloadEndpoint {
	app := p.g % 5
	tier := [3]string{"frontend", "backend", "db"}[app%3]
	labels, profiles := api.PodIdentity(p.ns(), "default", map[string]string{"app": fmt.Sprintf("app-%d", app), "tier": tier,
		"pod-template-hash": fmt.Sprintf("%08x", uint32(p.g/podsPerNS*5+app)*2654435761)})
	tcp := api.ProtocolFromName(api.ProtocolTCP)
	cid := p.cid()
	return &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(p.node(), "k8s", p.ns(), p.name(), "", "eth0"), Labels: labels},
		Spec: api.WorkloadEndpointSpec{
			Node: p.node(), Orchestrator: "k8s", Namespace: p.ns(), Pod: p.name(), ContainerID: cid, Endpoint: "eth0",
			InterfaceName: "cali" + cid[:11], ContainerInterface: "eth0",
			IPNetworks: []string{netip.PrefixFrom(p.addr(), 32).String()},
			MAC:        fmt.Sprintf("ee:%s:%s:%s:%s:%s", cid[0:2], cid[2:4], cid[4:6], cid[6:8], cid[8:10]),
			Handle:     ipam.PodHandle(ipam.DefaultNetwork, cid), ServiceAccountName: "default", Profiles: profiles,
			Ports: []api.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}, {Name: "metrics", Protocol: tcp, Port: 9090}},
		},
	}
}

// writeBigCluster writes pods pods on pods/podsPerNode nodes: each
// node's Node record, its block with its pods' allocations and handles
// (the IPAM client's import), and its pods' endpoints; one profile per
// namespace.
func writeBigCluster(b *testing.B, ds *datastore.Client, pods int) {
	b.Helper()
	ctx := context.Background()
	put := func(rs []api.Resource) error {
		ops := make([]clientv3.Op, 0, len(rs))
		for _, r := range rs {
			key, val, err := datastore.Encode(r)
			if err != nil {
				return fmt.Errorf("%s %s: %w", r.GetKind(), r.Meta().Name, err)
			}
			ops = append(ops, clientv3.OpPut(key, string(val)))
		}
		_, err := ds.Etcd().Txn(ctx).Then(ops...).Commit()
		return err
	}
	if err := put([]api.Resource{&api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: "pods"}, Spec: api.IPPoolSpec{CIDR: "10.0.0.0/8", BlockSize: 26}}}); err != nil {
		b.Fatal(err)
	}
	nodes := pods / podsPerNode
	var namespaces []api.Resource
	for i := 0; i <= pods/podsPerNS; i++ {
		ns := benchPod(i * podsPerNS).ns()
		namespaces = append(namespaces, &api.Profile{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile},
			Metadata: api.ObjectMeta{Name: api.NamespaceProfilePrefix + ns},
			Spec:     api.ProfileSpec{LabelsToApply: map[string]string{"pcns.kubernetes.io/metadata.name": ns, "pcns.team": "team-" + strconv.Itoa(i%50)}}})
	}
	for len(namespaces) > 0 {
		n := min(len(namespaces), txnOps)
		if err := put(namespaces[:n]); err != nil {
			b.Fatal(err)
		}
		namespaces = namespaces[n:]
	}
	ic := ipam.New(ds)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= nodes {
					return
				}
				if err := writeBenchNode(ctx, ic, put, n); err != nil {
					errs <- fmt.Errorf("node %d: %w", n, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func writeBenchNode(ctx context.Context, ic *ipam.Client, put func([]api.Resource) error, n int) error {
	name := benchNodeName(n)
	node := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
		Metadata: api.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
			"topology.kubernetes.io/zone": fmt.Sprintf("zone-%c", 'a'+n%3)}},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: fmt.Sprintf("172.16.%d.%d/16", n>>8, n&255)}}}
	if err := put([]api.Resource{node}); err != nil {
		return err
	}
	ib := ipam.ImportBlock{CIDR: benchPod(n * podsPerNode).block(), Node: name}
	var weps []api.Resource
	for j := range podsPerNode {
		p := benchPod(n*podsPerNode + j)
		ib.Allocations = append(ib.Allocations, ipam.ImportAllocation{Ordinal: j, Handle: ipam.PodHandle(ipam.DefaultNetwork, p.cid()),
			Namespace: p.ns(), Pod: p.name(), Node: name, Type: ipam.TypePod})
		weps = append(weps, p.wep())
	}
	if _, err := ic.Import(ctx, []ipam.ImportBlock{ib}, false); err != nil {
		return err
	}
	return put(weps)
}

func containsLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}
