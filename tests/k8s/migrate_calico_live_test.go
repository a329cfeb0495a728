package k8s_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"k8s.io/client-go/kubernetes"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/lab"
)

// Probe and policy ports of the live migration's pods.
const (
	echoPort   = 7000 // UDP echo: the continuous probes
	gnpDenied  = 9001 // denied by the migrated GlobalNetworkPolicy
	npDenied   = 9002 // denied from web-1 to db-1 by the migrated NetworkPolicy
	openPort   = 9003 // allowed everywhere: the control
	probeEvery = 50 * time.Millisecond
)

// TestMigrateCalicoKDDLiveNodeByNode: issue 38's live switch. A Calico
// cluster on the Kubernetes datastore (a real kube-apiserver with
// Calico's CRDs) runs pods on three lab nodes, set up by Calico's own CNI
// plugin and IPAM (v3.31.0, KDD mode), their inter-node routes held as
// calico-node holds them: a BIRD 2 per node with Calico's mesh
// configuration (same AS, the nodes' annotated addresses, graceful
// restart), routes in the kernel as protocol bird, and Calico's own
// felix per node (v3.31.0, nftables mode). Under UDP probes
// every 50 ms between the pods of every pair of nodes, Calico's IPAM is
// frozen, `routedctl migrate calico --from-kubeconfig` writes routed's
// etcd, and the nodes switch one at a time, the middle address first
// (so a routed node meets BIRDs on both sides of it): calico-node's
// BIRD goes without a Cease (SIGKILL, as when calico-node's container is
// killed: its peers keep its routes through graceful restart, its
// kernel routes stay), routed starts, and once it is Ready (its
// readiness probe, which the doc waits for) Calico's routes are flushed;
// then every mesh session of the routed node is Established, the
// BIRDs' included. Asserted: less than 1 s of probes lost per switch on the
// streams across the switched node (measured: none) and none on the
// others; the mixed mesh exchanges routes both ways (routed programs
// the BIRD nodes' blocks, the BIRDs learn the routed node's block from
// routed); the migrated GlobalNetworkPolicy and NetworkPolicy denies
// hold throughout (their flows tried about 5 times a second before,
// during and after the switch never connect: before a node switches
// Calico's own felix drops them, stopped with its BIRD; the table it
// leaves is deleted once routed is Ready, as the doc says), and deny real TCP on
// each node once it runs routed; every pod keeps its address and
// Calico's handle; `ipam check` is clean; a new pod on a switched node
// gets an address from that node's migrated block and reaches the old
// pods.
func TestMigrateCalicoKDDLiveNodeByNode(t *testing.T) {
	liveSwitch(t, newKDDLive, (*lab.CalicoBird).Kill, time.Second)
}

// TestMigrateCalicoKDDLiveNodeByNodeCease is the same switch with
// calico-node's BIRD stopped as a terminated calico-node stops it
// (SIGTERM: it closes its sessions with a Cease). The remaining BIRDs
// then drop the node's block at once instead of keeping it through
// graceful restart, and pods on nodes still on Calico lose the switched
// node's pods until its routed's session with them is up (0 for the
// last node, whose peers all run routed, and 0 between the other
// nodes). Where routed dials (it has the higher address), GoBGP's first
// attempt is at once (third_party/gobgp/PATCHED.md): 1.65 to 1.85 s of
// probes before that patch. Where the BIRD has the higher address and
// dials, its template's connect delay time 2 waited 1.5 to 2 s after the
// Cease (1.55 to 1.75 s measured, up to 2.35 s); routed, passive there,
// now dials once at once too (PATCHED.md's fourth change), and BIRD,
// past its startup delay, takes the connection. Measured over three
// runs (2026-11-29, with Calico's felix): 0 to 0.1 s (0 to 2 probes)
// in every switch. The bound asserted is the same as without a Cease,
// 1 s.
func TestMigrateCalicoKDDLiveNodeByNodeCease(t *testing.T) {
	liveSwitch(t, newKDDLive, (*lab.CalicoBird).Stop, time.Second)
}

// liveCalico is the Calico cluster a live switch migrates, on one of
// Calico's datastores. What differs between them is where Calico's
// components keep their state: so how the test writes what they write,
// how Calico's CNI plugin is configured, where the blocks are read
// from, how the IPAM is frozen and what routedctl migrates from. The
// pods are in Kubernetes either way (the CNI plugin reads them there).
type liveCalico interface {
	// kube is the API server holding the pods, and a client of it.
	kube() (*kubeapiserver.Server, kubernetes.Interface)
	// namespace holds the pods and the migrated NetworkPolicy.
	namespace() string
	// setUp writes what calico-node and calico-kube-controllers write
	// for the lab's nodes before a pod starts, and the policies.
	setUp(ctx context.Context, t *testing.T, l *lab.Lab)
	// cniDatastore is the datastore part of Calico's CNI configuration
	// on a lab node.
	cniDatastore(t *testing.T, node string) map[string]any
	// affinities are each node's confirmed blocks, read where
	// calico-node's confd reads them.
	affinities(ctx context.Context, t *testing.T) map[string][]netip.Prefix
	// freeze disables Calico's pool, as the doc's step does.
	freeze(ctx context.Context, t *testing.T)
	// from are `routedctl migrate calico`'s source flags, reaching the
	// datastore from the lab's router namespace.
	from(t *testing.T, l *lab.Lab, dir string) []string
	// felixDatastore is the datastore part of the environment of
	// Calico's felix on a lab node (kddFelix, etcdFelix).
	felixDatastore(t *testing.T, node, dir string) []string
}

// liveSwitch runs the live switch of the cluster newSource makes,
// stopping each node's BIRD with stop, and asserts at most maxLoss of
// probes lost per switch across the switched node. Felix runs in
// nftables mode, or in iptables mode if mode is felixIptables.
func liveSwitch(t *testing.T, newSource func(*testing.T) liveCalico, stop func(*lab.CalicoBird), maxLoss time.Duration, mode ...felixMode) {
	requireRoot(t)
	felixIn := felixNFTables
	if len(mode) > 0 {
		felixIn = mode[0]
	}
	began := time.Now()
	phase := func(what string) { t.Logf("%s: %s into the test", what, time.Since(began).Round(100*time.Millisecond)) }
	calico := buildCalicoCNI(t)
	// Calico's own felix enforces Calico's policies on each node until
	// it switches. On the Kubernetes datastore it lists kinds whose CRDs
	// the migration does not need.
	felixBin := buildCalicoFelix(t)
	src := newSource(t)
	srv, kube := src.kube()
	if k, ok := src.(*kddLive); ok {
		installFelixCRDs(t, k.srv)
	}
	phase("Calico's datastore ready")
	l := migrationLab(t)
	phase("lab up")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	nodes := l.Topo.Nodes
	dir := t.TempDir()

	src.setUp(ctx, t, l)
	bin := calicoBinDir(t, calico, dir)
	ns := src.namespace()
	cpods := []*calicoPod{
		{ns: ns, name: "web-1", node: nodes[0].Name, cid: "11c0ffee01"},
		{ns: ns, name: "db-1", node: nodes[1].Name, cid: "11c0ffee02"},
		{ns: ns, name: "db-2", node: nodes[2].Name, cid: "11c0ffee03"},
	}
	pods := map[string]lab.Pod{} // by node
	for _, p := range cpods {
		createPod(ctx, t, kube, p)
		kc := apiRelay(t, srv, p.node, dir)
		pods[p.node] = calicoLabADD(ctx, t, l, bin, dir, kc, src.cniDatastore(t, p.node), p)
		reportPodIP(ctx, t, kube, p)
	}

	phase("Calico's CNI plugin set up the pods")
	// calico-node's BIRD on every node, once the blocks are claimed.
	blocks := src.affinities(ctx, t)
	pool := netip.MustParsePrefix(l.Topo.PoolCIDR)
	birds := map[string]*lab.CalicoBird{}
	for _, n := range nodes {
		if len(blocks[n.Name]) == 0 {
			t.Fatalf("Calico's IPAM gave %s no confirmed block: %v", n.Name, blocks)
		}
		b, err := l.StartCalicoBird(ctx, n.Name, l.Topo.NodeAS, pool, blocks[n.Name])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Kill)
		birds[n.Name] = b
	}
	for _, n := range nodes {
		for _, o := range nodes {
			if o.Name != n.Name {
				if err := birds[n.Name].WaitEstablished(ctx, o.Addr.Addr(), 30*time.Second); err != nil {
					t.Fatal(err)
				}
				waitBlockRoutes(t, l, n.Name, blocks[o.Name], o.Addr.Addr(), "proto bird")
			}
		}
	}

	phase("the BIRD mesh is up")
	// Probes between the pods of every pair of nodes, and the ports
	// policy decides.
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	for _, p := range pods {
		if err := lab.UDPEcho(ctx, p, echoPort); err != nil {
			t.Fatal(err)
		}
		for _, port := range []int{gnpDenied, npDenied, openPort} {
			if err := lab.TCPListen(ctx, p, port); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.Name != to.Name && !reaches(t, from, to.IP, openPort) {
				t.Fatalf("before the migration (Calico's dataplane): %s cannot reach %s:%d", from.Name, to.Name, openPort)
			}
		}
	}
	// Calico's verdicts on the policies before the switch, from Calico's
	// felix, and the denied flows tried throughout.
	web, db1 := pods[cpods[0].node], pods[cpods[1].node]
	var denied []*deniedFlow
	felixes := map[string]*calicoFelix{}
	for i, n := range nodes {
		to, from := pods[n.Name], pods[nodes[(i+1)%len(nodes)].Name]
		denied = append(denied, &deniedFlow{from: from, to: to, port: gnpDenied})
		if to.Name == db1.Name {
			denied = append(denied, &deniedFlow{from: web, to: db1, port: npDenied})
		}
		felixes[n.Name] = startLiveFelix(t, felixBin, src, n.Name, felixIn, dir)
	}
	for name, f := range felixes {
		start := time.Now()
		f.waitReady(t, 2*time.Minute)
		t.Logf("Calico's felix on %s ready after %s", name, time.Since(start).Round(time.Millisecond))
	}
	phase("Calico's felix ready on every node")
	// Felix reports ready once its first dataplane update is applied;
	// a deny not in force within seconds of that is a failure.
	watchers := watchDenied(t, probeCtx, denied)
	type stream struct {
		res lab.ProbeResult
		err error
	}
	pairs := [][2]lab.Pod{{pods[nodes[0].Name], pods[nodes[1].Name]}, {pods[nodes[0].Name], pods[nodes[2].Name]}, {pods[nodes[1].Name], pods[nodes[2].Name]}}
	streams := make([]stream, len(pairs))
	var wg sync.WaitGroup
	for i, pr := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			streams[i].res, streams[i].err = lab.ProbeStream(probeCtx, pr[0], pr[1], echoPort, probeEvery, 2*time.Second)
		}()
	}

	phase("probes running")
	migrateLive(ctx, t, src, l, dir)
	phase("migrated")

	// The switch, node by node: the middle address first, so the first
	// routed node has a BIRD with a lower and one with a higher address
	// (Calico's mesh makes the lower one passive).
	var windows []switchWindow
	switched := map[string]bool{}
	for _, i := range []int{1, 2, 0} {
		x := nodes[i]
		w := switchWindow{node: x.Name, start: time.Now()}
		// calico-node's pod goes: its BIRD and its felix stop together.
		var felixDone sync.WaitGroup
		felixDone.Add(1)
		go func() {
			defer felixDone.Done()
			felixes[x.Name].stop(t)
			t.Logf("Calico's felix on %s exited %s after SIGTERM", x.Name, time.Since(w.start).Round(time.Millisecond))
		}()
		stop(birds[x.Name])
		felixDone.Wait()
		if err := l.StartNode(ctx, x.Name); err != nil {
			t.Fatal(err)
		}
		// docs/migrate-calico.md: once routed-node is Ready (its
		// readiness probe), remove what Calico left on the node.
		testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, func() string {
			if body, err := l.NodeHTTP(ctx, x.Name, 9099, "/readiness"); err != nil {
				return fmt.Sprintf("routed on %s not ready: %v\n%s", x.Name, err, body)
			}
			return ""
		})
		if err := l.ClearCalicoDataplane(ctx, x.Name); err != nil {
			t.Fatal(err)
		}
		if felixIn.iptables {
			felixes[x.Name].clearIptables(t)
		} else {
			clearCalicoNFTables(ctx, t, x.Name)
		}
		t.Logf("%s switched to routed in %s", x.Name, time.Since(w.start).Round(time.Millisecond))
		switched[x.Name] = true
		waitMeshEstablished(t, l, x.Name)
		for _, o := range nodes {
			if o.Name == x.Name {
				continue
			}
			waitBlockRoutes(t, l, x.Name, blocks[o.Name], o.Addr.Addr(), "proto 82")
			// The mixed mesh, one way: routed has the node's block as the
			// best path from that node's session (BIRD's while it runs).
			for _, blk := range blocks[o.Name] {
				testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
					out, err := l.NodeCtl(ctx, x.Name, "show", "route", blk.String())
					if err != nil || !learnedFrom(out, blk, o.Addr.Addr()) {
						return fmt.Sprintf("routed on %s has not learned %s from %s (BIRD: %v): %v\n%s", x.Name, blk, o.Name, !switched[o.Name], err, out)
					}
					return ""
				})
			}
		}
		// The mixed mesh, the other way: each remaining BIRD has the routed node's
		// block from routed itself (routed's LOCAL_PREF, 2147482623; the
		// BIRD that held it sent 100) and installs it.
		for _, o := range nodes {
			if switched[o.Name] {
				continue
			}
			if err := birds[o.Name].WaitEstablished(ctx, x.Addr.Addr(), 30*time.Second); err != nil {
				t.Fatal(err)
			}
			for _, blk := range blocks[x.Name] {
				testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
					out, err := birds[o.Name].Birdc(ctx, "show", "route", "for", blk.String(), "all")
					if err != nil || !strings.Contains(out, lab.MeshProtocol(x.Addr.Addr())) || !strings.Contains(out, "BGP.local_pref: 2147482623") {
						return fmt.Sprintf("BIRD on %s has not learned %s from routed on %s: %v\n%s", o.Name, blk, x.Name, err, out)
					}
					return ""
				})
			}
			waitBlockRoutes(t, l, o.Name, blocks[x.Name], x.Addr.Addr(), "proto bird")
		}
		// A deny stays a deny once routed enforces on the node.
		to := pods[x.Name]
		for _, from := range pods {
			if from.Node == x.Name {
				continue
			}
			if reaches(t, from, to.IP, gnpDenied) {
				t.Errorf("after %s switched: %s reached %s:%d, which the migrated GlobalNetworkPolicy denies", x.Name, from.Name, to.Name, gnpDenied)
			}
			if !reaches(t, from, to.IP, openPort) {
				t.Errorf("after %s switched: %s cannot reach %s:%d (allowed)", x.Name, from.Name, to.Name, openPort)
			}
		}
		// Let the probes run on the settled state before the next switch.
		time.Sleep(3 * time.Second)
		w.end = time.Now()
		windows = append(windows, w)
	}
	stopProbes()
	wg.Wait()
	watchers.Wait()
	reportDenied(t, denied)

	for _, s := range streams {
		if s.err != nil {
			t.Fatal(s.err)
		}
		t.Logf("probes %s", s.res)
	}
	for _, w := range windows {
		for _, s := range streams {
			lost := s.res.LostBetween(w.start, w.end)
			across := s.res.From.Node == w.node || s.res.To.Node == w.node
			where := "between nodes not switching"
			if across {
				where = "across the switched node"
			}
			t.Logf("switch of %s (%s with settling): %s -> %s (%s) lost %d probes = %s", w.node, w.end.Sub(w.start).Round(time.Millisecond),
				s.res.From.Name, s.res.To.Name, where, lost, time.Duration(lost)*probeEvery)
			switch {
			case !across && lost > 0:
				t.Errorf("switch of %s: %d probes lost between %s and %s, on nodes not being switched", w.node, lost, s.res.From.Name, s.res.To.Name)
			case time.Duration(lost)*probeEvery >= maxLoss:
				t.Errorf("switch of %s: %s -> %s lost %s of probes, bound %s", w.node, s.res.From.Name, s.res.To.Name, time.Duration(lost)*probeEvery, maxLoss)
			}
		}
	}
	// Outside the switches (freeze, migration, settling) nothing is lost.
	for _, s := range streams {
		inWindows := 0
		for _, w := range windows {
			inWindows += s.res.LostBetween(w.start, w.end)
		}
		if other := s.res.Lost() - inWindows; other != 0 {
			t.Errorf("%s -> %s: %d probes lost outside the node switches: %s", s.res.From.Name, s.res.To.Name, other, s.res.Gaps())
		}
	}

	phase("switched")
	checkAfterLiveMigration(ctx, t, l, cpods, pods, blocks)
	phase("checked")
}

// startLiveFelix runs Calico's felix as the felix of the lab node node,
// in that node's namespace, on src's datastore.
func startLiveFelix(t *testing.T, bin string, src liveCalico, node string, mode felixMode, dir string) *calicoFelix {
	t.Helper()
	h, err := ns.GetNS(lab.NodeNetNSPath(node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return startCalicoFelix(t, bin, h, node, mode, src.felixDatastore(t, node, dir), dir)
}

// clearCalicoNFTables checks that Calico's felix, stopped in nftables
// mode, left its table on node, and deletes it with the doc's own
// line (step 6.2's `nft delete table ip calico ...`).
func clearCalicoNFTables(ctx context.Context, t *testing.T, node string) {
	t.Helper()
	tables := nodeNFTables(t, node)
	t.Logf("nftables tables on %s once felix stopped and routed is Ready:\n%s", node, tables)
	if !strings.Contains(tables, "table ip calico\n") {
		t.Errorf("no table ip calico on %s: Calico's felix left no rules", node)
	}
	line := calicoNFTablesCleanup(t)
	if out, err := exec.CommandContext(ctx, "nsenter", "--net="+lab.NodeNetNSPath(node), "sh", "-ec", line).CombinedOutput(); err != nil {
		t.Fatalf("%s: the doc's %q: %v\n%s", node, line, err, out)
	}
	// The doc's `nft delete table` lines leave only routed's.
	for _, line := range strings.Split(strings.TrimSpace(nodeNFTables(t, node)), "\n") {
		if f := strings.Fields(line); len(f) != 3 || !strings.HasPrefix(f[2], "routed") {
			t.Errorf("%s: %q left after the doc's nft lines, not routed's", node, line)
		}
	}
}

// calicoNFTablesCleanup is docs/migrate-calico.md step 6.2's line that
// deletes Calico's nftables tables.
func calicoNFTablesCleanup(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "migrate-calico.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(doc), "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "nft delete table ip calico") {
			return line
		}
	}
	t.Fatal("docs/migrate-calico.md has no `nft delete table ip calico` line")
	return ""
}

// felixDatastore: the API server, through a relay into the node's
// namespace.
func (k *kddLive) felixDatastore(t *testing.T, node, dir string) []string {
	return kddFelix(apiRelay(t, k.srv, node, dir))
}

// nodeNFTables is `nft list tables` in a lab node's namespace.
func nodeNFTables(t *testing.T, node string) string {
	t.Helper()
	return nsNFTables(t, lab.NodeNetNSPath(node))
}

// liveCalicoObjects are the live cluster's Calico resources, as
// crd.projectcalico.org/v1 custom resources: the pool (no
// encapsulation), the mesh's BGP configuration, the cluster's readiness
// (clusterType as calico-node sets it), the tiers Calico always has,
// and the policies to migrate, the NetworkPolicy in namespace ns. The
// policies are named as libcalico-go v3.31 stores them on either
// datastore (names.TieredPolicyName): under their tier's prefix, the
// name their user gave kept in the projectcalico.org/metadata
// annotation, which is the name Calico shows them by. The NetworkPolicy
// (order 10, no rule past its deny) comes before the
// GlobalNetworkPolicy (order 100) that ends in an Allow: in Calico's
// tier evaluation the first matching rule decides.
func liveCalicoObjects(pool string, asn uint32, ns, clusterType string) []string {
	crd := func(kind, meta, spec string) string {
		return fmt.Sprintf("apiVersion: crd.projectcalico.org/v1\nkind: %s\nmetadata: %s\nspec: %s\n", kind, meta, spec)
	}
	stored := func(name string) string {
		return fmt.Sprintf(`name: default.%s, annotations: {projectcalico.org/metadata: '{"name":"%s"}'}`, name, name)
	}
	docs := []string{
		crd("IPPool", "{name: default-ipv4-ippool}", fmt.Sprintf("{cidr: %s, ipipMode: Never, vxlanMode: Never, natOutgoing: false, blockSize: 26, nodeSelector: all()}", pool)),
		crd("BGPConfiguration", "{name: default}", fmt.Sprintf("{nodeToNodeMeshEnabled: true, asNumber: %d}", asn)),
		crd("ClusterInformation", "{name: default}", `{clusterGUID: 7a1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a, clusterType: "`+clusterType+`", calicoVersion: v3.31.0, datastoreReady: true}`),
	}
	for _, tier := range []struct {
		name, order, action string
	}{{"kube-admin", "1000", "Pass"}, {"default", "1000000", "Deny"}, {"kube-baseline", "10000000", "Pass"}} {
		docs = append(docs, crd("Tier", "{name: "+tier.name+"}", "{order: "+tier.order+", defaultAction: "+tier.action+"}"))
	}
	docs = append(docs,
		crd("GlobalNetworkPolicy", "{"+stored(fmt.Sprintf("deny-tcp-%d", gnpDenied))+"}",
			fmt.Sprintf("{order: 100, selector: all(), types: [Ingress], ingress: [{action: Deny, protocol: TCP, destination: {ports: [%d]}}, {action: Allow}]}", gnpDenied)),
		crd("NetworkPolicy", "{"+stored("db-1-not-from-web")+", namespace: "+ns+"}",
			fmt.Sprintf("{order: 10, selector: \"app == 'db-1'\", types: [Ingress], ingress: [{action: Deny, protocol: TCP, source: {selector: \"app == 'web-1'\"}, destination: {ports: [%d]}}]}", npDenied)))
	return docs
}

// switchWindow is the time one node took to switch, with settling.
type switchWindow struct {
	node       string
	start, end time.Time
}

// deniedFlow is a flow a migrated policy denies, tried again and again
// while the cluster switches: a connection that completes is a deny that
// did not hold.
type deniedFlow struct {
	from, to lab.Pod
	port     int
	tries    int
	breaches []time.Time
	err      error
}

// watchDenied waits up to 10 s until each flow is denied (Calico's
// policy in force before the migration), then tries it again and again
// until ctx ends; the caller waits for the returned group.
func watchDenied(t *testing.T, ctx context.Context, denied []*deniedFlow) *sync.WaitGroup {
	t.Helper()
	var watchers sync.WaitGroup
	for _, f := range denied {
		testenv.Eventually(t, 10*time.Second, 200*time.Millisecond, func() string {
			if reaches(t, f.from, f.to.IP, f.port) {
				return fmt.Sprintf("before the migration: %s reached %s:%d, which Calico's policy denies", f.from.Name, f.to.Name, f.port)
			}
			return ""
		})
		watchers.Add(1)
		go func() { defer watchers.Done(); f.watch(ctx) }()
	}
	return &watchers
}

// reportDenied logs how often each flow was tried and fails the test
// for any that connected or could not be tried.
func reportDenied(t *testing.T, denied []*deniedFlow) {
	t.Helper()
	for _, f := range denied {
		t.Logf("denied flow %s -> %s:%d tried %d times before, during and after the switch: %d connected", f.from.Name, f.to.Name, f.port, f.tries, len(f.breaches))
		if f.err != nil || len(f.breaches) > 0 || f.tries == 0 {
			t.Errorf("denied flow %s -> %s:%d: connected at %v (%v)", f.from.Name, f.to.Name, f.port, f.breaches, f.err)
		}
	}
}

// watch tries the flow until ctx ends.
func (f *deniedFlow) watch(ctx context.Context) {
	for ctx.Err() == nil {
		at := time.Now()
		ok, err := lab.TCPConnects(f.from, f.to.IP, f.port, 200*time.Millisecond)
		if err != nil {
			f.err = err
			return
		}
		f.tries++
		if ok {
			f.breaches = append(f.breaches, at)
		}
	}
}

// reaches reports whether a TCP connection from a pod to addr:port
// completes within a second.
func reaches(t *testing.T, from lab.Pod, addr string, port int) bool {
	t.Helper()
	ok, err := lab.TCPConnects(from, addr, port, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// waitMeshEstablished waits until `routedctl node status` on node
// lists a mesh session with every other lab node, each Established.
func waitMeshEstablished(t *testing.T, l *lab.Lab, node string) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		out, err := l.NodeCtl(context.Background(), node, "node", "status")
		for _, o := range l.Topo.Nodes {
			if o.Name != node && !hasLineWith(out, "| "+o.Addr.Addr().String()+" ", "Established") {
				return fmt.Sprintf("routed on %s: no established session with %s: %v\n%s", node, o.Name, err, out)
			}
		}
		return ""
	})
}

// learnedFrom reports whether `routedctl show route` output has blk as
// a best path learned from peer, with peer as next hop, not filtered.
func learnedFrom(out string, blk netip.Prefix, peer netip.Addr) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == blk.String() && f[1] == peer.String() && strings.Contains(f[2], peer.String()) && f[3] == "*" && !strings.Contains(line, "filtered") {
			return true
		}
	}
	return false
}

// hasLineWith reports whether a line of text contains every part.
func hasLineWith(text string, parts ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// waitBlockRoutes waits until node's kernel routes each block via next
// with the given protocol ("proto bird", "proto 82").
func waitBlockRoutes(t *testing.T, l *lab.Lab, node string, blocks []netip.Prefix, next netip.Addr, proto string) {
	t.Helper()
	waitRoutesVia(t, node, blocks, next, proto, func() (string, error) { return l.NodeRoutes(context.Background(), node) })
}

// waitRoutesVia waits until the routes read lists each block via next
// with proto (say "proto bird"), 30 s a block.
func waitRoutesVia(t *testing.T, node string, blocks []netip.Prefix, next netip.Addr, proto string, read func() (string, error)) {
	t.Helper()
	for _, blk := range blocks {
		testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
			routes, err := read()
			if err != nil {
				return err.Error()
			}
			for _, line := range strings.Split(routes, "\n") {
				if strings.HasPrefix(line, blk.String()+" ") && strings.Contains(line, "via "+next.String()+" ") && strings.Contains(line, proto) {
					return ""
				}
			}
			return fmt.Sprintf("%s: no route %s via %s %s:\n%s", node, blk, next, proto, routes)
		})
	}
}
