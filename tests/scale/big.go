package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/tests/lab"
)

// `scale big` (make scale-big): a datastore the size of a big cluster
// (issue 36), a handful of real routed nodes with real pods, the watch
// load of every other node on etcd, then cluster-wide churn. What it
// reports is in report(); the phases are in runBig.

// bigRun is one run's state.
type bigRun struct {
	f     *bigFlags
	sh    *shape
	l     *lab.Lab
	bins  lab.Binaries
	dir   string
	ds    *datastore.Client
	ic    *ipam.Client
	etcd  dialer
	nodes []*realNode
	pods  [][]*simPod // per simulated node, as loaded

	etcdPID  int
	gc       *gcProc // nil with -cluster-gc nodes
	watch    *watchLoad
	tracker  *setTracker
	pings    []pingPair
	out      report
	logMarks map[string]int64
}

// pingPair is a real pod pinging one on the next real node, all along.
type pingPair struct {
	from lab.Pod
	to   string
	res  chan lab.PingResult
}

const bigPrefix = "sbig"

func runBig(ctx context.Context, args []string) error {
	f, err := parseBigFlags(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("scale big needs root (network namespaces)")
	}
	b := &bigRun{f: f, sh: &f.sh, logMarks: map[string]int64{}}
	if err := b.prepare(); err != nil {
		return err
	}
	err = b.run(ctx)
	b.teardown()
	// A failed run keeps its logs; an interrupted one (Ctrl-C) is not a
	// failure to look into and leaves nothing behind.
	if f.keep || (err != nil && !errors.Is(err, context.Canceled)) {
		fmt.Printf("logs in %s\n", b.dir)
		return err
	}
	if rmErr := os.RemoveAll(b.dir); err == nil {
		err = rmErr
	}
	return err
}

func (b *bigRun) prepare() error {
	abs, err := filepath.Abs(b.f.bin)
	if err != nil {
		return err
	}
	cnitool, err := exec.LookPath("cnitool")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		cnitool = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "cnitool")
		if _, err := os.Stat(cnitool); err != nil {
			return fmt.Errorf("cnitool not found: run tests/ensure-deps.sh demo")
		}
	}
	b.bins = lab.Binaries{Routed: filepath.Join(abs, "routed"), Routedctl: filepath.Join(abs, "routedctl"),
		RoutedCNI: filepath.Join(abs, "routed-cni"), RoutedIPAM: filepath.Join(abs, "routed-ipam"), Cnitool: cnitool}
	b.dir = b.f.dir
	if b.dir == "" {
		if b.dir, err = os.MkdirTemp("", "routed-scale-big-"); err != nil {
			return err
		}
	}
	topo := lab.Topology{
		Prefix: bigPrefix, PoolCIDR: b.sh.pool.String(), IPIPMode: "Never", RouterAS: 65000, NodeAS: 64512,
		SubnetA: netip.MustParsePrefix("10.99.1.0/24"), SubnetB: netip.MustParsePrefix("10.99.2.0/24"),
		NoRouterBGP: true,
	}
	// A dedicated route reflector (BGP only, as big clusters run them)
	// that stays up: a real node started alone has its session at once.
	topo.Nodes = append(topo.Nodes, lab.NodeSpec{Name: bigPrefix + "-rr", Subnet: "a",
		Addr: netip.PrefixFrom(addrAt(topo.SubnetA, 10), 24), RR: true, Dedicated: true})
	for i := 1; i <= b.sh.real; i++ {
		n := lab.NodeSpec{Name: fmt.Sprintf("%s-n%d", bigPrefix, i), Subnet: "a", Addr: netip.PrefixFrom(addrAt(topo.SubnetA, 10+i), 24)}
		topo.Nodes = append(topo.Nodes, n)
		b.nodes = append(b.nodes, &realNode{spec: n, clusterGC: b.f.clusterGC == "nodes"})
	}
	topo.Configure = func(ctx context.Context, l *lab.Lab) error { return l.ApplyYAML(ctx, "big.yaml", b.baseYAML(topo)) }
	b.l = lab.New(topo, b.bins, b.dir, func(f string, a ...any) { fmt.Printf("==> "+f+"\n", a...) })
	return nil
}

// baseYAML is the cluster's configuration: the pool, BGP with the real
// nodes as clients of the dedicated route reflector (the peer selectors
// name the real nodes only: a simulated node has no BGP speaker), and
// the Node records of the real nodes and the reflector.
func (b *bigRun) baseYAML(t lab.Topology) string {
	var s strings.Builder
	fmt.Fprintf(&s, `apiVersion: routed.io/v1
kind: IPPool
metadata: {name: scale-big-pool}
spec: {cidr: %s, blockSize: %d, ipipMode: Never, vxlanMode: Never, natOutgoing: false}
---
apiVersion: routed.io/v1
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: %d, nodeToNodeMeshEnabled: false}
---
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: real-nodes-to-reflector}
spec: {nodeSelector: "scale-real == 'true'", peerSelector: "has(route-reflector)"}
`, b.sh.pool, b.sh.blockBits, t.NodeAS)
	for _, n := range t.Nodes {
		labels, rr := `scale-real: "true"`, ""
		if n.RR {
			labels, rr = `route-reflector: "true"`, ", routeReflectorClusterID: 224.0.0.1"
		}
		fmt.Fprintf(&s, "---\napiVersion: routed.io/v1\nkind: Node\nmetadata: {name: %s, labels: {%s}}\nspec: {bgp: {ipv4Address: %s%s}}\n",
			n.Name, labels, n.Addr, rr)
	}
	return s.String()
}

func (b *bigRun) run(ctx context.Context) error {
	sh := b.sh
	gnps, nps := sh.policyMix()
	fmt.Printf("scale-big: %d nodes (%d real), %d pods (%d on real nodes), %d namespaces, %d policies (%d GlobalNetworkPolicies, %d NetworkPolicies, %d of the real pods' namespace, 1 tracking), %d network sets; pool %s, /%d blocks\n",
		sh.nodes, sh.real, sh.pods, sh.real*sh.realPods, sh.namespaces, sh.policies, gnps, nps, sh.localPolicies, sh.netsets, sh.pool, sh.blockBits)
	if err := b.l.Up(ctx); err != nil {
		return err
	}
	var err error
	if b.etcd, err = dialerIn(b.l.Topo.RouterNS()); err != nil {
		return err
	}
	if b.ds, err = datastore.New(datastore.Config{Endpoints: []string{b.l.Topo.EtcdEndpoint()}, Dialer: b.etcd}); err != nil {
		return err
	}
	b.ic = ipam.New(b.ds)
	if b.etcdPID, err = etcdPID(b.dir); err != nil {
		return err
	}
	for _, n := range b.nodes {
		if n.dial, err = dialerIn(n.name()); err != nil {
			return err
		}
	}
	if err := b.realPods(ctx); err != nil {
		return err
	}
	// The lab's routed ran the pods' CNI ADDs; from here on each real
	// node runs as the harness starts it.
	for _, n := range b.nodes {
		b.l.StopNode(n.name(), false)
	}
	if err := b.load(ctx); err != nil {
		return err
	}
	if err := b.startWatchers(ctx); err != nil {
		return err
	}
	if b.f.clusterGC == "process" {
		if err := b.startClusterGC(); err != nil {
			return err
		}
	}
	if err := b.startNodes(ctx); err != nil {
		return err
	}
	if err := b.startTracking(ctx); err != nil {
		return err
	}
	if err := b.measureIdle(ctx); err != nil {
		return err
	}
	if err := b.runChurn(ctx); err != nil {
		return err
	}
	return b.finish(ctx)
}

// realPods starts every real node's pods through the CNI plugin (real
// veths, routes and policy), in parallel per node.
func (b *bigRun) realPods(ctx context.Context) error {
	start := time.Now()
	errs := make(chan error, len(b.nodes))
	for i, n := range b.nodes {
		go func() {
			for j := 0; j < b.sh.realPods; j++ {
				if _, err := b.l.AddPod(ctx, n.name(), fmt.Sprintf("n%d-p%d", i+1, j)); err != nil {
					errs <- fmt.Errorf("pod %d on %s: %w", j, n.name(), err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range b.nodes {
		if err := <-errs; err != nil {
			return err
		}
	}
	fmt.Printf("==> %d real pods through CNI ADD in %s\n", len(b.l.Pods()), time.Since(start).Round(time.Millisecond))
	return nil
}

// load writes the simulated cluster while the real nodes are stopped.
func (b *bigRun) load(ctx context.Context) error {
	sh := b.sh
	ld := &loader{ds: b.ds, ic: b.ic, workers: b.f.workers, seed: b.f.seed}
	start := time.Now()
	if err := b.ds.EnsureDefaultTiers(ctx); err != nil {
		return err
	}
	if err := loadStep(fmt.Sprintf("%d namespaces' profiles", sh.namespaces), func() error {
		return ld.putAll(ctx, sh.namespaces, namespaceObjects)
	}); err != nil {
		return err
	}
	taken := map[netip.Prefix]bool{}
	for _, n := range b.nodes {
		us, err := b.ic.BlocksForNode(ctx, n.name())
		if err != nil {
			return err
		}
		for _, u := range us {
			taken[u.CIDR] = true
		}
	}
	b.pods = make([][]*simPod, sh.simNodes())
	if err := loadStep(fmt.Sprintf("%d simulated nodes: Node, blocks and affinities, %d pods' handles and endpoints", sh.simNodes(), sh.simPods()), func() error {
		return ld.simNodes(ctx, sh, freeBlocks(sh.pool, sh.blockBits, taken), b.pods)
	}); err != nil {
		return err
	}
	if err := loadStep(fmt.Sprintf("%d network sets", sh.netsets), func() error {
		return ld.putAll(ctx, sh.netsets, func(i int) []api.Resource { return []api.Resource{simNetworkSet(i, sh.namespaces)} })
	}); err != nil {
		return err
	}
	pols := b.policies()
	if err := loadStep(fmt.Sprintf("%d policies", len(pols)), func() error { return ld.create(ctx, pols) }); err != nil {
		return err
	}
	keys, err := b.ds.Etcd().Get(ctx, datastore.KeyPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	took := time.Since(start)
	b.out.load = fmt.Sprintf("%d keys under %s written in %s (%d transactions, %.0f keys/s)",
		keys.Count, datastore.KeyPrefix, took.Round(time.Second), ld.txns.Load(), float64(keys.Count)/took.Seconds())
	fmt.Printf("==> datastore: %s\n", b.out.load)
	return nil
}

// policies are every policy of the run: the simulated namespaces' and
// global ones, the real pods' namespace's and the tracking one.
func (b *bigRun) policies() []api.Resource {
	gnps, nps := b.sh.policyMix()
	var out []api.Resource
	for i := 0; i < gnps; i++ {
		out = append(out, simGlobalPolicy(i))
	}
	for i := 0; i < nps; i++ {
		out = append(out, simNetworkPolicy(i, b.sh.namespaces))
	}
	for j := 0; j < b.sh.localPolicies; j++ {
		out = append(out, localPolicy(j))
	}
	return append(out, trackPolicy())
}

// loadStep runs one step of writing the datastore and prints its time.
func loadStep(what string, f func() error) error {
	t := time.Now()
	if err := f(); err != nil {
		return fmt.Errorf("load %s: %w", what, err)
	}
	fmt.Printf("==> load: %s in %s\n", what, time.Since(t).Round(time.Millisecond))
	return nil
}
