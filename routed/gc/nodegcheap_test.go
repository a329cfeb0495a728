package gc

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/procmem"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestNodeGCReadsInPages: read two keys a page, node GC still finds the
// node without a Node record among those with one, and after the grace
// removes its endpoints, every one, and no other.
func TestNodeGCReadsInPages(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	var gone, kept []string
	for i := range 10 {
		node := "alive"
		if i%3 != 0 {
			node = "gone"
		}
		name := fmt.Sprintf("%s-k8s-default-w%d-eth0", node, i)
		dstest.Apply(t, ds, fmt.Sprintf("apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: %s}\nspec: {node: %s, containerID: c%d, interfaceName: cali%d, ipNetworks: [10.1.0.%d/32]}\n", name, node, i, i, i+1))
		if node == "gone" {
			gone = append(gone, name)
		} else {
			kept = append(kept, name)
		}
	}
	for _, n := range []string{"alive", "other-1", "other-2"} {
		dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: "+n+"}\n")
	}
	fence, _ := elect(t, ds, gcElection+"-pages", "a")
	t0 := time.Now()
	g := &nodeGC{ds: ds, fence: fence, grace: time.Minute, now: func() time.Time { return t0 }, page: 2}
	if found, err := g.run(ctx); err != nil || len(found) != 0 {
		t.Fatalf("first pass: gone %v, %v", found, err)
	}
	g.now = func() time.Time { return t0.Add(time.Minute) }
	found, err := g.run(ctx)
	if err != nil || len(found) != 1 || !found["gone"] {
		t.Fatalf("after the grace: gone %v, %v; want node gone", found, err)
	}
	for _, w := range gone {
		if wepExists(t, ds, w) {
			t.Errorf("endpoint %s of the gone node kept", w)
		}
	}
	for _, w := range kept {
		if !wepExists(t, ds, w) {
			t.Errorf("endpoint %s of a live node removed", w)
		}
	}
}

var nodeGCHeapEndpoints = flag.Int("nodegcheap.endpoints", 20000, "endpoints BenchmarkNodeGCHeap writes (30 per node)")

// nodeGCHeapEnv names the pass a child process of BenchmarkNodeGCHeap
// runs (see TestMain).
const nodeGCHeapEnv = "NODEGCHEAP_PASS"

func TestMain(m *testing.M) {
	if pass := os.Getenv(nodeGCHeapEnv); pass != "" {
		logrus.SetLevel(logrus.WarnLevel) // one line per missing node
		os.Exit(nodeGCHeapChild(pass))
	}
	os.Exit(m.Run())
}

// writeCluster writes nodes*30 endpoints as routed-cni writes them,
// their nodes' /26 blocks through ipam's Import, and a Node record for
// every node but one in a hundred (those are missing: node GC keeps
// their endpoints' names).
func writeCluster(b *testing.B, ds *datastore.Client, nodes int) {
	batch := dstest.NewBatch(b, ds)
	ic := ipam.New(ds)
	for n := range nodes {
		node := fmt.Sprintf("sim-%05d", n)
		if n%100 != 99 {
			batch.Put(&api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: node}})
		}
		blk := ipam.ImportBlock{CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n >> 10), byte(n >> 2), byte(n%4) * 64}), 26), Node: node}
		for j := range 30 {
			i := n*30 + j
			handle := ipam.PodHandle(ipam.DefaultNetwork, fmt.Sprintf("%064x", i))
			ip := blk.CIDR.Addr().As4()
			ip[3] += byte(j)
			w := dstest.PodEndpoint(node, i, handle, netip.AddrFrom4(ip))
			blk.Allocations = append(blk.Allocations, ipam.ImportAllocation{Ordinal: j, Handle: handle, Namespace: w.Spec.Namespace, Pod: w.Spec.Pod, Node: node, Type: ipam.TypePod})
			batch.Put(w)
		}
		if _, err := ic.Import(context.Background(), []ipam.ImportBlock{blk}, false); err != nil {
			b.Fatalf("import %s's block: %v", node, err)
		}
	}
	batch.Flush()
}

// nodeGCHeapPasses: "paged" is node GC's pass as it is; "whole" the
// baseline, the reads it made before: every Node and every endpoint
// listed and decoded at once (the blocks counted as today, BlockOwners).
var nodeGCHeapPasses = map[string]func(ctx context.Context, ds *datastore.Client, fence datastore.Fence, n int) error{
	"paged": func(ctx context.Context, ds *datastore.Client, fence datastore.Fence, n int) error {
		g := &nodeGC{ds: ds, fence: fence, grace: time.Hour, now: time.Now}
		gone, err := g.run(ctx)
		if err == nil && len(gone) != 0 {
			err = fmt.Errorf("nodes gone before the grace: %v", gone)
		}
		return err
	},
	"whole": func(ctx context.Context, ds *datastore.Client, _ datastore.Fence, n int) error {
		nodes, _, err := ds.List(ctx, api.KindNode)
		if err != nil {
			return err
		}
		weps, _, err := ds.List(ctx, api.KindWorkloadEndpoint)
		if err != nil {
			return err
		}
		owners, err := ipam.New(ds).BlockOwners(ctx, 0)
		if err == nil && (len(weps) != n || len(owners) != n/30 || len(nodes) == 0) {
			err = fmt.Errorf("listed %d endpoints and %d nodes' blocks, want %d and %d", len(weps), len(owners), n, n/30)
		}
		return err
	},
}

// nodeGCHeapFigures is what one pass in a process of its own measured.
type nodeGCHeapFigures struct {
	Peak, Allocated, Anon uint64
	Millis                int64
}

// nodeGCHeapChild runs one pass against the etcd at $NODEGCHEAP_ETCD, in
// this process, which holds nothing else (the test's etcd is embedded in
// the parent), elected as the GC leader, and prints what it measured.
func nodeGCHeapChild(pass string) int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, err); return 1 }
	n, _ := strconv.Atoi(os.Getenv("NODEGCHEAP_ENDPOINTS"))
	ds, err := datastore.New(datastore.Config{Endpoints: strings.Split(os.Getenv("NODEGCHEAP_ETCD"), ",")})
	if err != nil {
		return fail(err)
	}
	defer ds.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sess, err := concurrency.NewSession(ds.Etcd(), concurrency.WithTTL(30))
	if err != nil {
		return fail(err)
	}
	defer sess.Close()
	e := concurrency.NewElection(sess, gcElection+"-bench")
	if err := e.Campaign(ctx, "bench"); err != nil {
		return fail(err)
	}
	var f nodeGCHeapFigures
	t0 := time.Now()
	f.Peak, f.Allocated = procmem.HeapDuring(func() { err = nodeGCHeapPasses[pass](ctx, ds, datastore.Fence{Key: e.Key(), Rev: e.Rev()}, n) })
	f.Millis = time.Since(t0).Milliseconds()
	if err != nil {
		return fail(err)
	}
	st, _ := procmem.ReadStatus(os.Getpid())
	f.Anon = uint64(st.Anon)
	_ = json.NewEncoder(os.Stdout).Encode(f)
	return 0
}

// BenchmarkNodeGCHeap measures node GC's pass (the first half of the
// elected node's cluster GC) against a real etcd holding
// -nodegcheap.endpoints endpoints, 30 a node, one node in a hundred
// missing: the heap it holds at once and allocates per endpoint and the
// anonymous memory of its process after it, each pass in a process of
// its own, "paged" beside the "whole" baseline.
func BenchmarkNodeGCHeap(b *testing.B) {
	ds := dstest.Client(b)
	n := (*nodeGCHeapEndpoints + 29) / 30 * 30
	start := time.Now()
	writeCluster(b, ds, n/30)
	b.Logf("wrote %d endpoints in %s", n, time.Since(start).Round(time.Millisecond))
	for _, pass := range []string{"paged", "whole"} {
		b.Run(pass, func(b *testing.B) {
			var worst nodeGCHeapFigures
			for range b.N {
				var f nodeGCHeapFigures
				procmem.RunChild(b, []string{nodeGCHeapEnv + "=" + pass, "NODEGCHEAP_ETCD=" + strings.Join(ds.Endpoints(), ","), "NODEGCHEAP_ENDPOINTS=" + strconv.Itoa(n)}, &f)
				worst = nodeGCHeapFigures{Peak: max(worst.Peak, f.Peak), Allocated: max(worst.Allocated, f.Allocated), Anon: max(worst.Anon, f.Anon), Millis: max(worst.Millis, f.Millis)}
			}
			b.ReportMetric(float64(worst.Peak)/float64(n), "peak-heap-B/endpoint")
			b.ReportMetric(float64(worst.Allocated)/float64(n), "alloc-B/endpoint")
			b.ReportMetric(float64(worst.Millis), "ms/pass")
			b.Logf("%s, %d endpoints: peak heap %.1f MiB, allocated %.1f MiB; anonymous memory after %.1f MiB; %d ms",
				pass, n, procmem.MiB(int64(worst.Peak)), procmem.MiB(int64(worst.Allocated)), procmem.MiB(int64(worst.Anon)), worst.Millis)
		})
	}
}
