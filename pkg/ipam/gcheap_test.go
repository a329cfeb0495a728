package ipam

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/procmem"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

var gcHeapEndpoints = flag.Int("gcheap.endpoints", 20000, "endpoints BenchmarkGCHeap writes (30 per node)")

// bigIPAM writes a cluster's IPAM state and endpoints the way routed and
// the scale-big loader write them: per node its Node record, its /26
// blocks through Import (block, confirmed affinity, one handle per pod)
// and its pods' WorkloadEndpoints as routed-cni writes them.
func bigIPAM(tb testing.TB, e *env, c *Client, nodes, perNode int) {
	tb.Helper()
	batch := dstest.NewBatch(tb, e.ds)
	for n := range nodes {
		node := fmt.Sprintf("sim-%05d", n)
		batch.Put(&api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: node}})
		var ibs []ImportBlock
		for j := range perNode {
			if j%64 == 0 {
				ibs = append(ibs, ImportBlock{CIDR: netip.PrefixFrom(addrAt(pfx("10.0.0.0/8"), (n*((perNode+63)/64)+j/64)*64), 26), Node: node})
			}
			ib, i := &ibs[len(ibs)-1], n*perNode+j
			handle := PodHandle(DefaultNetwork, fmt.Sprintf("%064x", i))
			w := dstest.PodEndpoint(node, i, handle, addrAt(ib.CIDR, j%64))
			ib.Allocations = append(ib.Allocations, ImportAllocation{Ordinal: j % 64, Handle: handle, Namespace: w.Spec.Namespace, Pod: w.Spec.Pod, Node: node, Type: TypePod})
			batch.Put(w)
		}
		if _, err := c.Import(ctxT(tb), ibs, false); err != nil {
			tb.Fatalf("import %s's blocks: %v", node, err)
		}
	}
	batch.Flush()
}

// wholeGCRead is the baseline: what GC read before it read page by page,
// in one transaction (every IPAM record, the pools and configuration,
// every Node and every WorkloadEndpoint), decoded whole, with what check
// built from it (the endpoints' handles and addresses, the handle
// records the blocks call for). It returns the number of endpoints.
func wholeGCRead(ctx context.Context, c *Client) (int, error) {
	resp, err := c.readMany(ctx,
		clientv3.OpGet(ipamPrefix, clientv3.WithPrefix()),
		clientv3.OpGet(datastore.KindPrefix(api.KindIPPool), clientv3.WithPrefix()),
		clientv3.OpGet(ipamConfigKey()),
		reservationsOp(),
		clientv3.OpGet(datastore.KindPrefix(api.KindNode), clientv3.WithPrefix()),
		clientv3.OpGet(datastore.KindPrefix(api.KindWorkloadEndpoint), clientv3.WithPrefix()),
		clientv3.OpGet(blockPrefix, clientv3.WithPrefix())) // the blocks, apart from their summaries since layout 2
	if err != nil {
		return 0, err
	}
	r := resp.Responses
	s := &snapshot{rev: resp.Header.Revision, blocks: map[string]blockKV{}, affs: map[string]affKV{}, handles: map[string]handleKV{}}
	for _, i := range []int{0, 6} {
		for _, kv := range r[i].GetResponseRange().Kvs {
			s.addIPAM(string(kv.Key), kv)
		}
	}
	s.addNodes(r[4].GetResponseRange().Kvs)
	var weps []*api.WorkloadEndpoint
	for _, kv := range r[5].GetResponseRange().Kvs {
		var w api.WorkloadEndpoint
		if err := json.Unmarshal(kv.Value, &w); err != nil {
			return 0, err
		}
		weps = append(weps, &w)
	}
	wepHandles, wepIPs := map[string]bool{}, map[netip.Addr]bool{}
	for _, w := range weps {
		wepHandles[w.Spec.Handle] = true
		for _, n := range w.Spec.IPNetworks {
			if p, err := netip.ParsePrefix(n); err == nil {
				wepIPs[p.Addr()] = true
			}
		}
	}
	derived := s.derivedHandles()
	runtime.KeepAlive(resp)
	if len(derived) != len(s.handles) || len(wepHandles) != len(weps) || len(wepIPs) != len(weps) {
		return 0, fmt.Errorf("baseline read %d handles, %d derived, %d endpoints", len(s.handles), len(derived), len(weps))
	}
	return len(weps), nil
}

// gcHeapPasses are the passes BenchmarkGCHeap measures, each checking
// what it read from a cluster of n endpoints.
var gcHeapPasses = map[string]func(ctx context.Context, c *Client, n int) error{
	// GC as it is: its check, its writes (none: the cluster is clean)
	// and its second read.
	"paged": func(ctx context.Context, c *Client, n int) error {
		r, err := c.GC(ctx, time.Hour)
		if err == nil && r.Problems()+len(r.Errors)+r.YoungLeaks > 0 {
			err = fmt.Errorf("GC of a clean cluster found %+v", r)
		}
		return err
	},
	"whole": func(ctx context.Context, c *Client, n int) error {
		got, err := wholeGCRead(ctx, c)
		if err == nil && got != n {
			err = fmt.Errorf("read %d endpoints, want %d", got, n)
		}
		return err
	},
	"usage":  func(ctx context.Context, c *Client, n int) error { _, err := c.Usage(ctx); return err },
	"owners": func(ctx context.Context, c *Client, n int) error { _, err := c.BlockOwners(ctx, 0); return err },
}

// gcHeapChild runs one pass in this process, a client of the etcd at
// $GCHEAP_ETCD, and prints what it measured as JSON (gcHeapFigures).
// BenchmarkGCHeap runs the test binary again for it (see TestMain): the
// package's etcd is embedded, and its memory would count with the
// client's in one process.
func gcHeapChild(pass string) int {
	n, _ := strconv.Atoi(os.Getenv("GCHEAP_ENDPOINTS"))
	ds, err := datastore.New(datastore.Config{Endpoints: strings.Split(os.Getenv("GCHEAP_ETCD"), ",")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer ds.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := New(ds)
	var f gcHeapFigures
	f.AnonBefore = anonMemory()
	t0 := time.Now()
	f.Peak, f.Allocated = procmem.HeapDuring(func() { err = gcHeapPasses[pass](ctx, c, n) })
	f.Millis = time.Since(t0).Milliseconds()
	f.AnonAfter = anonMemory()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(f)
	return 0
}

// gcHeapFigures is what one pass in a process of its own measured.
type gcHeapFigures struct {
	Peak, Allocated       uint64 // heap bytes: most in use at once, allocated
	AnonBefore, AnonAfter uint64 // the process's anonymous memory (RssAnon), bytes
	Millis                int64
}

// anonMemory is the process's resident anonymous memory (RssAnon).
func anonMemory() uint64 {
	st, _ := procmem.ReadStatus(os.Getpid())
	return uint64(st.Anon)
}

// BenchmarkGCHeap measures, per endpoint of the cluster, the heap one
// pass holds at once and allocates, and the anonymous memory of the
// process after it, against a real etcd holding -gcheap.endpoints
// endpoints (30 a node, /26 blocks). Every pass runs in a process of its
// own that holds nothing else (gcHeapChild): "paged" is IPAM GC as it is,
// "whole" the baseline of one read of everything (wholeGCRead), "usage"
// and "owners" the block reads of metrics and node GC.
func BenchmarkGCHeap(b *testing.B) {
	e := newEnv(b)
	e.pool("p", "10.0.0.0/8", 26)
	c := New(e.ds)
	n := (*gcHeapEndpoints + 29) / 30 * 30
	start := time.Now()
	bigIPAM(b, e, c, n/30, 30)
	b.Logf("wrote %d endpoints in %s", n, time.Since(start).Round(time.Millisecond))
	for _, pass := range []string{"paged", "whole", "usage", "owners"} {
		b.Run(pass, func(b *testing.B) {
			var worst gcHeapFigures
			for range b.N {
				f := runGCHeapChild(b, pass, e, n)
				worst.Peak, worst.Allocated = max(worst.Peak, f.Peak), max(worst.Allocated, f.Allocated)
				worst.AnonBefore, worst.AnonAfter = max(worst.AnonBefore, f.AnonBefore), max(worst.AnonAfter, f.AnonAfter)
				worst.Millis = max(worst.Millis, f.Millis)
			}
			b.ReportMetric(float64(worst.Peak)/float64(n), "peak-heap-B/endpoint")
			b.ReportMetric(float64(worst.Allocated)/float64(n), "alloc-B/endpoint")
			b.ReportMetric(float64(worst.Millis), "ms/pass")
			b.Logf("%s, %d endpoints: peak heap %.1f MiB, allocated %.1f MiB; anonymous memory %.1f MiB before, %.1f MiB after; %d ms",
				pass, n, mib(worst.Peak), mib(worst.Allocated), mib(worst.AnonBefore), mib(worst.AnonAfter), worst.Millis)
		})
	}
}

func mib(v uint64) float64 { return float64(v) / (1 << 20) }

func runGCHeapChild(b *testing.B, pass string, e *env, n int) gcHeapFigures {
	var f gcHeapFigures
	procmem.RunChild(b, []string{gcHeapPassEnv + "=" + pass, "GCHEAP_ETCD=" + strings.Join(e.ds.Endpoints(), ","), "GCHEAP_ENDPOINTS=" + strconv.Itoa(n)}, &f)
	return f
}

// gcHeapPassEnv names the pass a child process of BenchmarkGCHeap runs.
const gcHeapPassEnv = "GCHEAP_PASS"
