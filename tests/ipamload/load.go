// Package ipamload execs routed-ipam the way a container runtime does
// (libcni's invoke), many at once on several nodes, against a real etcd
// with fsync on, and counts what failed and what stayed allocated. It is
// shared by the test (no failures, nothing left) and the benchmark (ADDs
// per second beside the previous release's binary).
package ipamload

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/cniserver"
)

// Cluster is a real etcd (fsync on, as production runs it) holding one
// pool and Nodes records for the simulated nodes.
type Cluster struct {
	Endpoints []string
	Store     *datastore.Client

	mu     sync.Mutex
	routed []*ipam.Client // the IPAM clients of StartRouted's servers
}

// NewCluster starts etcd in a temp dir and creates pool cidr (blocks of
// blockSize) and the nodes. Everything stops when the test ends.
func NewCluster(t testing.TB, cidr string, blockSize int, nodes []string) *Cluster {
	t.Helper()
	srv, err := etcdserver.Start(context.Background(), etcdserver.Config{
		Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", LogLevel: "fatal",
	})
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(srv.Close)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ds.Close() })
	ctx := context.Background()
	pool := &api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: "load-pool"}, Spec: api.IPPoolSpec{CIDR: cidr, BlockSize: blockSize}}
	if _, err := ds.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		node := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode},
			Metadata: api.ObjectMeta{Name: n}}
		node.Spec.BGP = &api.NodeBGPSpec{IPv4Address: fmt.Sprintf("10.250.0.%d/24", i+1)}
		if _, err := ds.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
	}
	return &Cluster{Endpoints: srv.Endpoints, Store: ds}
}

// Run describes one load run: Parallel ADDs at a time on each node, each
// worker adding Rounds pods one after the other, then every pod deleted
// with the same parallelism.
type Run struct {
	Plugin   string // path of the routed-ipam binary
	Nodes    []string
	Parallel int
	Rounds   int
	// Network names the CNI network; runs on one cluster use distinct
	// networks so their handles never meet.
	Network string
	// LockDir holds one lock file per node (each simulated node is its
	// own host).
	LockDir string
	LogFile string
	// Sockets, when set, is each node's routed CNI socket (StartRouted):
	// the plugin asks routed there. Unset: the plugin works against etcd
	// itself (routed_socket "none").
	Sockets map[string]string
	// HostLocal, when set, makes the run the reference: Plugin is the
	// reference host-local, each node with its own /24 of HostLocalNet
	// (index i: x.y.i.0/24) and its own dataDir under HostLocal.
	HostLocal    string
	HostLocalNet [2]byte
}

// Result is what a Run measured.
type Result struct {
	Adds, AddFailures int
	Dels, DelFailures int
	AddTime           time.Duration
	// Left counts addresses the run's network still holds afterwards.
	Left int
	// AddRequests counts the etcd requests (range reads and
	// transactions) routed's IPAM clients made during the ADDs; 0 when
	// the plugin works against etcd itself.
	AddRequests uint64
	// PluginCPU is the user+system CPU of the exec'd plugin processes
	// of the ADD phase (RUSAGE_CHILDREN: every plugin is this process's
	// child, and a hand-over's execve stays the same process); SelfCPU
	// that of this process meanwhile: routed's CNI service, etcd and the
	// harness, which all run in it.
	PluginCPU, SelfCPU time.Duration
	// Errors holds a few distinct failure messages.
	Errors []string
}

// PerAdd is d per ADD.
func (r Result) PerAdd(d time.Duration) time.Duration { return d / time.Duration(r.Adds) }

// cpuTimes returns the user+system CPU of this process and of its
// waited-for children.
func cpuTimes() (self, children time.Duration) {
	var s, c unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &s)
	_ = unix.Getrusage(unix.RUSAGE_CHILDREN, &c)
	tv := func(t unix.Timeval) time.Duration { return time.Duration(t.Nano()) }
	return tv(s.Utime) + tv(s.Stime), tv(c.Utime) + tv(c.Stime)
}

// RequestsPerAdd is AddRequests per ADD.
func (r Result) RequestsPerAdd() float64 { return float64(r.AddRequests) / float64(r.Adds) }

// AddsPerSecond is the ADD throughput of the whole run.
func (r Result) AddsPerSecond() float64 { return float64(r.Adds) / r.AddTime.Seconds() }

// Execute runs r against c.
func Execute(t testing.TB, c *Cluster, r Run) Result {
	t.Helper()
	var res Result
	var mu sync.Mutex
	errs := map[string]bool{}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if len(errs) < 5 {
			errs[err.Error()] = true
		}
	}
	type pod struct{ node, id string }
	var pods []pod
	var addFail, delFail atomic.Int64
	var wg sync.WaitGroup
	before := c.InUse(t)
	req0 := c.routedRequests()
	self0, child0 := cpuTimes()
	start := time.Now()
	for _, node := range r.Nodes {
		for w := range r.Parallel {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range r.Rounds {
					id := fmt.Sprintf("%s-%s-w%d-r%d", r.Network, node, w, i)
					if err := r.exec(c, "ADD", node, id); err != nil {
						addFail.Add(1)
						fail(err)
						continue
					}
					mu.Lock()
					pods = append(pods, pod{node, id})
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	res.AddTime = time.Since(start)
	self1, child1 := cpuTimes()
	res.SelfCPU, res.PluginCPU = self1-self0, child1-child0
	if r.Sockets != nil {
		res.AddRequests = c.routedRequests() - req0
	}
	res.Adds = len(r.Nodes) * r.Parallel * r.Rounds
	res.AddFailures = int(addFail.Load())

	// DEL every pod, also those whose ADD failed (a runtime does that
	// too): a failed ADD must leave nothing, and DEL must be idempotent.
	work := make(chan pod)
	for range len(r.Nodes) * r.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if err := r.exec(c, "DEL", p.node, p.id); err != nil {
					delFail.Add(1)
					fail(err)
				}
			}
		}()
	}
	for _, node := range r.Nodes {
		for w := range r.Parallel {
			for i := range r.Rounds {
				work <- pod{node, fmt.Sprintf("%s-%s-w%d-r%d", r.Network, node, w, i)}
			}
		}
	}
	close(work)
	wg.Wait()
	res.Dels = res.Adds
	res.DelFailures = int(delFail.Load())
	if r.HostLocal != "" {
		res.Left = hostLocalHeld(t, r.HostLocal, r.Network)
	} else {
		res.Left = c.InUse(t) - before
	}
	for e := range errs {
		res.Errors = append(res.Errors, e)
	}
	sort.Strings(res.Errors)
	return res
}

// exec runs the plugin once, as libcni does.
func (r Run) exec(c *Cluster, verb, node, containerID string) error {
	netconf := map[string]any{
		"cniVersion":     "1.0.0",
		"name":           r.Network,
		"type":           "routed-cni",
		"etcd_endpoints": c.Endpoints[0],
		"nodename":       node,
		"log_file_path":  r.LogFile,
		"ipam_lock_file": filepath.Join(r.LockDir, node+".lock"),
		"routed_socket":  r.socket(node),
		"ipam":           map[string]any{"type": "routed-ipam"},
	}
	if r.HostLocal != "" {
		i := slices.Index(r.Nodes, node)
		netconf = map[string]any{
			"cniVersion": "1.0.0",
			"name":       r.Network,
			"type":       "ptp",
			"ipam": map[string]any{
				"type":    "host-local",
				"subnet":  fmt.Sprintf("%d.%d.%d.0/24", r.HostLocalNet[0], r.HostLocalNet[1], i),
				"dataDir": filepath.Join(r.HostLocal, node),
			},
		}
	}
	conf, err := json.Marshal(netconf)
	if err != nil {
		return err
	}
	cniArgs := "K8S_POD_NAMESPACE=load;K8S_POD_NAME=" + containerID
	if r.HostLocal != "" {
		// host-local refuses keys it does not know, as a runtime's
		// IgnoreUnknown asks it not to.
		cniArgs = "IgnoreUnknown=1;" + cniArgs
	}
	args := &invoke.Args{
		Command:       verb,
		ContainerID:   containerID,
		NetNS:         "/var/run/netns/" + containerID,
		IfName:        "eth0",
		PluginArgsStr: cniArgs,
		Path:          filepath.Dir(r.Plugin),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if verb == "ADD" {
		_, err = invoke.ExecPluginWithResult(ctx, r.Plugin, conf, args, nil)
	} else {
		err = invoke.ExecPluginWithoutResult(ctx, r.Plugin, conf, args, nil)
	}
	if err != nil {
		return fmt.Errorf("%s %s on %s: %w", verb, containerID, node, err)
	}
	return nil
}

func (r Run) socket(node string) string {
	if s, ok := r.Sockets[node]; ok {
		return s
	}
	return "none"
}

// StartRouted serves routed's CNI socket for each node, as routed on
// that node does (routed/cniserver with its own long-lived IPAM client),
// until the test ends, and returns the sockets by node. The pools do
// not change while it runs, so the client's pool view is trusted as
// routed's is between feed updates.
func (c *Cluster) StartRouted(t testing.TB, nodes []string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	socks := map[string]string{}
	for _, n := range nodes {
		sock := filepath.Join(t.TempDir(), "run", "cni.sock")
		ic := ipam.New(c.Store, ipam.WithWatchedPools())
		c.mu.Lock()
		c.routed = append(c.routed, ic)
		c.mu.Unlock()
		srv := cniserver.New(cniserver.Config{Socket: sock, Node: n, DS: c.Store, IPAM: ic})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Run(ctx); err != nil {
				t.Errorf("CNI socket of %s: %v", n, err)
			}
		}()
		socks[n] = sock
	}
	for _, sock := range socks {
		testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() string {
			conn, err := net.Dial("unix", sock)
			if err != nil {
				return fmt.Sprintf("CNI socket %s not accepting: %v", sock, err)
			}
			conn.Close()
			return ""
		})
	}
	return socks
}

// routedRequests sums the etcd requests of StartRouted's IPAM clients.
func (c *Cluster) routedRequests() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n uint64
	for _, ic := range c.routed {
		st := ic.Stats()
		n += st.Gets + st.Txns
	}
	return n
}

// InUse counts the allocated addresses of every pool.
func (c *Cluster) InUse(t testing.TB) int {
	t.Helper()
	u, err := ipam.New(c.Store).Usage(context.Background())
	if err != nil {
		t.Fatalf("ipam usage: %v", err)
	}
	n := 0
	for _, p := range u.Pools {
		n += p.InUse
	}
	return n
}

// hostLocalHeld counts the addresses host-local holds for network under
// dir (one file per address in <dir>/<node>/<network>/).
func hostLocalHeld(t testing.TB, dir, network string) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*", network, "*"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if _, err := netip.ParseAddr(filepath.Base(f)); err == nil {
			n++
		}
	}
	return n
}
