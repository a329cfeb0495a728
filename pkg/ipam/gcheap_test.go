package ipam

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

var gcHeapEndpoints = flag.Int("gcheap.endpoints", 20000, "endpoints BenchmarkGCHeap writes (30 per node)")

// bigIPAM writes a cluster's IPAM state and endpoints the way routed and
// the scale-big loader write them: per node its Node record, its /26
// blocks through Import (block, confirmed affinity, one handle per pod)
// and its pods' WorkloadEndpoints (labels, profiles, named ports, as
// routed-cni writes a Kubernetes pod's), encoded by datastore.Encode and
// put 100 to a transaction. It returns the endpoints' addresses.
func bigIPAM(tb testing.TB, e *env, c *Client, nodes, perNode int) []netip.Addr {
	tb.Helper()
	ctx := ctxT(tb)
	tcp := api.ProtocolFromName(api.ProtocolTCP)
	var ips []netip.Addr
	var ops []clientv3.Op
	flush := func() {
		if _, err := e.ds.Etcd().Txn(ctx).Then(ops...).Commit(); err != nil {
			tb.Fatal(err)
		}
		ops = ops[:0]
	}
	put := func(r api.Resource) {
		k, v, err := datastore.Encode(r)
		if err != nil {
			tb.Fatal(err)
		}
		if ops = append(ops, clientv3.OpPut(k, string(v))); len(ops) == 100 {
			flush()
		}
	}
	for n := range nodes {
		node := fmt.Sprintf("sim-%05d", n)
		put(&api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode}, Metadata: api.ObjectMeta{Name: node}})
		var ibs []ImportBlock
		for j := range perNode {
			if j%64 == 0 {
				ibs = append(ibs, ImportBlock{CIDR: netip.PrefixFrom(addrAt(pfx("10.0.0.0/8"), (n*((perNode+63)/64)+j/64)*64), 26), Node: node})
			}
			ns := fmt.Sprintf("ns-%04d", (n+j)%2000)
			pod := fmt.Sprintf("app-%d-%08x-%05x", j%5, uint32(n*31+j)*2654435761, n*perNode+j)
			handle := PodHandle(DefaultNetwork, fmt.Sprintf("%016x%016x%016x%016x", n, j, n*j, n+j))
			ib := &ibs[len(ibs)-1]
			ip := addrAt(ib.CIDR, j%64)
			ib.Allocations = append(ib.Allocations, ImportAllocation{Ordinal: j % 64, Handle: handle, Namespace: ns, Pod: pod, Node: node, Type: TypePod})
			labels, profiles := api.PodIdentity(ns, "default", map[string]string{"app": fmt.Sprintf("app-%d", j%5), "tier": "backend", "pod-template-hash": "5d8f7c9b4"})
			put(&api.WorkloadEndpoint{
				TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
				Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(node, "k8s", ns, pod, "", "eth0"), Labels: labels},
				Spec: api.WorkloadEndpointSpec{Node: node, Orchestrator: "k8s", Namespace: ns, Pod: pod, ContainerID: handle[len(DefaultNetwork)+1:],
					Endpoint: "eth0", InterfaceName: "cali" + handle[len(handle)-11:], ContainerInterface: "eth0",
					IPNetworks: []string{netip.PrefixFrom(ip, 32).String()}, MAC: "ee:ee:ee:ee:ee:ee", Handle: handle,
					ServiceAccountName: "default", Profiles: profiles,
					Ports: []api.WorkloadEndpointPort{{Name: "http", Protocol: tcp, Port: 8080}, {Name: "grpc", Protocol: tcp, Port: 9000}, {Name: "metrics", Protocol: tcp, Port: 9090}}},
			})
			ips = append(ips, ip)
		}
		if _, err := c.Import(ctx, ibs, false); err != nil {
			tb.Fatalf("import %s's blocks: %v", node, err)
		}
	}
	flush()
	return ips
}

// heapDuring runs f and returns the most heap in use while it ran, above
// what was live before, and the bytes f allocated. The heap is sampled
// every millisecond with the collector at GOGC=10, so that garbage adds
// little: the peak is close to what f held at once.
func heapDuring(f func()) (peak, allocated uint64) {
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	runtime.GC()
	metrics.Read(s)
	base, alloc0 := s[0].Value.Uint64(), s[1].Value.Uint64()
	stop, done := make(chan struct{}), make(chan uint64)
	go func() {
		high := base
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		one := s[:1:1]
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
		clientv3.OpGet(datastore.KindPrefix(api.KindWorkloadEndpoint), clientv3.WithPrefix()))
	if err != nil {
		return 0, err
	}
	r := resp.Responses
	s := &snapshot{rev: resp.Header.Revision, blocks: map[string]blockKV{}, affs: map[string]affKV{}, handles: map[string]handleKV{}}
	for _, kv := range r[0].GetResponseRange().Kvs {
		s.addIPAM(string(kv.Key), kv)
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
	f.Peak, f.Allocated = heapDuring(func() { err = gcHeapPasses[pass](ctx, c, n) })
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
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssAnon:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
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
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), gcHeapPassEnv+"="+pass, "GCHEAP_ETCD="+strings.Join(e.ds.Endpoints(), ","), "GCHEAP_ENDPOINTS="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%s pass: %v", pass, err)
	}
	var f gcHeapFigures
	if err := json.Unmarshal(out, &f); err != nil {
		b.Fatalf("%s pass printed %q: %v", pass, out, err)
	}
	return f
}

// gcHeapPassEnv names the pass a child process of BenchmarkGCHeap runs.
const gcHeapPassEnv = "GCHEAP_PASS"
