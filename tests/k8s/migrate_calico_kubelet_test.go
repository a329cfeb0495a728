package k8s_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/internal/testenv"
	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/lab"
	"github.com/routed-net/routed/tests/testbin"
)

// TestMigrateCalicoKDDOnKubelet is issue 38's proof on the two-node
// cluster of `make k8s-demo` (a kubelet, containerd and kube-proxy per
// node): the pods are the kubelet's, set up through containerd by
// Calico's own CNI plugin and IPAM (v3.31.0, Kubernetes datastore,
// 10-calico.conflist as Calico's install writes it), and routed-node
// comes to each node as the pod of the DaemonSet that
// docs/migrate-calico-overlay restricts to labelled nodes. calico-node
// is stood in for by what it runs: Calico's felix (nftables mode) and a
// BIRD 2 with Calico's mesh configuration, in the node's namespace.
// Under UDP probes every 50 ms between the pods of the two nodes, the
// doc's Kubernetes-datastore steps run: Calico's pool frozen, `routedctl
// migrate calico --from-kubeconfig`, routed's pool enabled, routed
// applied with the overlay; then per node step 6.1 (BIRD killed, as
// `sv kill bird` kills it: no Cease; `kubectl label node`; felix sent
// SIGTERM, as the label ends calico-node's container), the routed-node
// pod Ready, step 6.2's block run on the node from the doc's own text,
// NetworkUnavailable False (6.3).
// Asserted: less than 1 s of probes lost per switch and none outside
// the switches; no pod restarted (same UID, container ID, restart count
// 0, the same container process alive throughout); every pod keeps
// Calico's address, held in routed's IPAM by Calico's handle; `ipam
// check` clean; the migrated GlobalNetworkPolicy and NetworkPolicy
// denies hold before, during and after (tried about 5 times a second,
// never connected); the mixed mesh exchanges routes both ways; a new
// pod on a switched node gets an address from that node's migrated
// block through routed's CNI and reaches the old pods; deleting a pod
// Calico set up releases its address through routed's CNI DEL.
func TestMigrateCalicoKDDOnKubelet(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	began := time.Now()
	phase := func(what string) { t.Logf("%s: %s into the test", what, time.Since(began).Round(100*time.Millisecond)) }
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	apiBin, nodeBin := kubeBinaries(ctx, t)
	calico := buildCalicoCNI(t)
	felixBin := buildCalicoFelix(t)
	routed := testbin.Path(t, "routed")
	testbin.Path(t, "routedctl")
	bin := filepath.Dir(routed)
	dir := t.TempDir()
	cdir := filepath.Join(dir, "cluster")
	subnet := netip.MustParsePrefix("10.249.0.0/24")
	c, err := k8scluster.Up(ctx, k8scluster.Config{Dir: cdir, Prefix: "rk8c", Subnet: subnet, Nodes: 2,
		Routed: routed, KubeAPIServer: apiBin, KubeNode: nodeBin, Logf: t.Logf})
	t.Cleanup(c.Down)
	if err != nil {
		failOnCluster(t, c, "cluster up", err)
	}
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := c.Kubectl(ctx, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	phase("cluster up")

	// Calico on the Kubernetes datastore: its CRDs, pool, mesh, tiers
	// and the policies to migrate; the nodes as calico-node annotates
	// them; its CNI plugin and configuration on each node.
	pool := netip.MustParsePrefix("10.248.0.0/16")
	const asn = 64512
	crds := []string{"create", "-f", filepath.Join("testdata", "calico-crds")}
	for _, f := range felixCRDFiles(t) {
		crds = append(crds, "-f", f)
	}
	kubectl(crds...)
	kubectl("wait", "--for=condition=Established", "--timeout=90s", "crd", "--all")
	kubectl("create", "namespace", "shop")
	objs := filepath.Join(dir, "calico.yaml")
	if err := os.WriteFile(objs, []byte(strings.Join(liveCalicoObjects(pool.String(), asn, "shop", "k8s,bgp,kdd"), "---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl("create", "-f", objs)
	var peers []netip.Addr
	for _, n := range c.Nodes {
		kubectl("annotate", "node", n.Name, "projectcalico.org/IPv4Address="+netip.PrefixFrom(n.Addr, subnet.Bits()).String())
		peers = append(peers, n.Addr)
	}
	nodeKubeconfig := filepath.Join(cdir, "node.kubeconfig")
	for _, n := range c.Nodes {
		installCalicoCNI(t, calico, n, nodeKubeconfig, dir)
	}
	kubectl("wait", "node", "--all", "--for=condition=Ready", "--timeout=120s")
	phase("Calico's CNI plugin installed, nodes Ready")

	// The pods, the kubelet's, on both nodes.
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		if _, err := c.Kubectl(ctx, "-n", "shop", "get", "serviceaccount", "default"); err != nil {
			return err.Error()
		}
		return ""
	})
	pods := []*kubeletPod{{name: "web-1", node: c.Nodes[0]}, {name: "db-1", node: c.Nodes[1]}}
	for _, p := range pods {
		p.create(t, c, ctx)
	}
	for _, p := range pods {
		p.running(t, c, ctx)
		if got := p.annotations["cni.projectcalico.org/podIP"]; got != p.ip+"/32" {
			t.Fatalf("%s: Calico's podIP annotation %q, status.podIP %s: not set up by Calico's plugin", p.name, got, p.ip)
		}
		if out, err := c.NodeExecOn(ctx, p.node, "ip", "link", "show", "dev", calicoVeth("shop", p.name)); err != nil {
			t.Fatalf("Calico's host device for %s: %v\n%s", p.name, err, out)
		}
		t.Logf("%s on %s: %s (Calico), container %s, process %d", p.name, p.node.Name, p.ip, p.containerID, p.pid)
	}
	handles := calicoHandles(t, kubectl("get", "ipamblocks.crd.projectcalico.org", "-o", "json"))
	for _, p := range pods {
		if p.calicoHandle = handles[p.name]; !strings.HasPrefix(p.calicoHandle, "k8s-pod-network.") {
			t.Fatalf("Calico's IPAM holds no handle for %s: %v", p.name, handles)
		}
	}
	web, db := pods[0].lab, pods[1].lab
	phase("the kubelet's pods Running, set up by Calico's plugin")

	// calico-node's BIRD and felix on each node.
	blocks := confirmedBlocks(t, kubectl("get", "blockaffinities.crd.projectcalico.org", "-o", "json"))
	birds := map[string]*lab.CalicoBird{}
	felixes := map[string]*calicoFelix{}
	for _, n := range c.Nodes {
		if len(blocks[n.Name]) == 0 {
			t.Fatalf("Calico's IPAM gave %s no confirmed block: %v", n.Name, blocks)
		}
		b, err := lab.StartCalicoBirdIn(ctx, n.Name, filepath.Join(dir, n.Name+"-bird"), n.Addr, peers, asn, pool, blocks[n.Name])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Kill)
		birds[n.Name] = b
		h, err := ns.GetNS("/var/run/netns/" + n.Name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		felixes[n.Name] = startCalicoFelix(t, felixBin, h, n.Name, felixNFTables, kddFelix(nodeKubeconfig), dir)
	}
	for _, n := range c.Nodes {
		o := otherNode(c, n)
		if err := birds[n.Name].WaitEstablished(ctx, o.Addr, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		waitNodeRoutes(t, c, n, blocks[o.Name], o.Addr, "proto bird")
		felixes[n.Name].waitReady(t, 2*time.Minute)
	}
	phase("calico-node's BIRD mesh up, felix ready on both nodes")

	for _, p := range []lab.Pod{web, db} {
		if err := lab.UDPEcho(ctx, p, echoPort); err != nil {
			t.Fatal(err)
		}
		for _, port := range []int{gnpDenied, npDenied, openPort} {
			if err := lab.TCPListen(ctx, p, port); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, pr := range [][2]lab.Pod{{web, db}, {db, web}} {
		if !reaches(t, pr[0], pr[1].IP, openPort) {
			t.Fatalf("before the migration (Calico's dataplane): %s cannot reach %s:%d", pr[0].Name, pr[1].Name, openPort)
		}
	}
	denied := []*deniedFlow{{from: web, to: db, port: gnpDenied}, {from: db, to: web, port: gnpDenied}, {from: web, to: db, port: npDenied}}
	probeCtx, stopProbes := context.WithCancel(ctx)
	defer stopProbes()
	watchers := watchDenied(t, probeCtx, denied)
	var probes lab.ProbeResult
	var probeErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		probes, probeErr = lab.ProbeStream(probeCtx, web, db, echoPort, probeEvery, 2*time.Second)
	}()
	phase("probes running, Calico's denies in force")

	// Steps 2 to 5 of docs/migrate-calico.md (Kubernetes datastore).
	kubectl("patch", "ippools.crd.projectcalico.org", "default-ipv4-ippool", "--type", "merge", "-p", `{"spec":{"disabled":true}}`)
	routedctl := func(args ...string) string {
		t.Helper()
		out, err := demo.Routedctl(ctx, c, bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	plan := routedctl("migrate", "calico", "--dry-run", "--from-kubeconfig", c.Kubeconfig)
	out := routedctl("migrate", "calico", "--from-kubeconfig", c.Kubeconfig)
	t.Logf("migration:\n%s", out)
	if !strings.Contains(out, " 0 conflicts") || strings.Contains(out, "Not carried over: pod") || strings.Contains(out, "Not carried over: WorkloadEndpoint") {
		t.Fatalf("migration did not carry everything:\n%s\nplan:\n%s", out, plan)
	}
	routedPool := routedctl("get", "ippool", "default-ipv4-ippool", "-o", "yaml")
	if !strings.Contains(routedPool, "disabled: true") {
		t.Fatalf("routed's copy of the frozen pool:\n%s", routedPool)
	}
	enabled := filepath.Join(dir, "pool-enabled.yaml")
	if err := os.WriteFile(enabled, []byte(strings.Replace(routedPool, "disabled: true", "disabled: false", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	routedctl("replace", "-f", enabled)
	if out := routedctl("ipam", "check"); !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check after the migration:\n%s", out)
	}
	overlay, err := demo.InstallFrom(ctx, c, repoRoot(), bin, filepath.Join(repoRoot(), "docs", "migrate-calico-overlay"), t.Logf)
	if overlay != "" {
		t.Cleanup(func() { os.RemoveAll(overlay) })
	}
	if err != nil {
		failOnCluster(t, c, "routed's install from docs/migrate-calico-overlay", err)
	}
	phase("migrated; routed-controllers running, routed-node on no node yet")

	// Step 6, node by node: the second node first.
	var windows []switchWindow
	switched := map[string]bool{}
	for _, i := range []int{1, 0} {
		n := c.Nodes[i]
		o := otherNode(c, n)
		w := switchWindow{node: n.Name, start: time.Now()}
		// Step 6.1: calico-node's BIRD killed first (`sv kill bird`: no
		// Cease, its peers keep its routes through graceful restart, its
		// kernel routes stay), then the label, which ends calico-node's
		// container: felix gets SIGTERM.
		birds[n.Name].Kill()
		kubectl("label", "node", n.Name, "routed.io/node=true")
		felixes[n.Name].stop(t)
		testenv.Eventually(t, 3*time.Minute, time.Second, func() string {
			_, err := c.Kubectl(ctx, "-n", "kube-system", "wait", "pod", "-l", "app.kubernetes.io/component=node",
				"--field-selector", "spec.nodeName="+n.Name, "--for=condition=Ready", "--timeout=10s")
			if err != nil {
				return fmt.Sprintf("routed-node on %s not Ready: %v", n.Name, err)
			}
			return ""
		})
		t.Logf("routed-node Ready on %s %s after calico-node went", n.Name, time.Since(w.start).Round(time.Millisecond))
		if out, err := c.NodeExecOn(ctx, n, "sh", "-c", migrateStep62(t)); err != nil {
			t.Fatalf("step 6.2 on %s: %v\n%s", n.Name, err, out)
		}
		calicoLeft(ctx, t, c, n)
		testenv.Eventually(t, 60*time.Second, 500*time.Millisecond, func() string {
			got, err := c.Kubectl(ctx, "get", "node", n.Name, "-o", `jsonpath={.status.conditions[?(@.type=="NetworkUnavailable")].status}`)
			if err != nil || got != "False" {
				return fmt.Sprintf("%s: NetworkUnavailable %q (step 6.3 wants False): %v", n.Name, got, err)
			}
			return ""
		})
		t.Logf("%s switched to routed in %s", n.Name, time.Since(w.start).Round(time.Millisecond))
		switched[n.Name] = true
		testenv.Eventually(t, 60*time.Second, time.Second, func() string {
			out, err := demo.RoutedOn(ctx, c, n.Name, "node", "status")
			if err != nil || !hasLineWith(out, "| "+o.Addr.String()+" ", "Established") {
				return fmt.Sprintf("routed on %s: no established session with %s: %v\n%s", n.Name, o.Name, err, out)
			}
			return ""
		})
		waitNodeRoutes(t, c, n, blocks[o.Name], o.Addr, "proto 82")
		if !switched[o.Name] {
			// The mixed mesh, the other way: the remaining BIRD has the
			// switched node's block from routed and installs it.
			if err := birds[o.Name].WaitEstablished(ctx, n.Addr, 30*time.Second); err != nil {
				t.Fatal(err)
			}
			waitNodeRoutes(t, c, o, blocks[n.Name], n.Addr, "proto bird")
		}
		for _, pr := range [][2]lab.Pod{{web, db}, {db, web}} {
			if reaches(t, pr[0], pr[1].IP, gnpDenied) {
				t.Errorf("after %s switched: %s reached %s:%d, which the migrated GlobalNetworkPolicy denies", n.Name, pr[0].Name, pr[1].Name, gnpDenied)
			}
			if !reaches(t, pr[0], pr[1].IP, openPort) {
				t.Errorf("after %s switched: %s cannot reach %s:%d (allowed)", n.Name, pr[0].Name, pr[1].Name, openPort)
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
	phase("both nodes switched")

	reportDenied(t, denied)
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	t.Logf("probes %s", probes)
	inWindows := 0
	for _, w := range windows {
		lost := probes.LostBetween(w.start, w.end)
		inWindows += lost
		t.Logf("switch of %s (%s with settling): %s -> %s lost %d probes = %s", w.node, w.end.Sub(w.start).Round(time.Millisecond),
			web.Name, db.Name, lost, time.Duration(lost)*probeEvery)
		if time.Duration(lost)*probeEvery >= time.Second {
			t.Errorf("switch of %s: lost %s of probes, bound 1s", w.node, time.Duration(lost)*probeEvery)
		}
	}
	if other := probes.Lost() - inWindows; other != 0 {
		t.Errorf("%d probes lost outside the node switches: %s", other, probes.Gaps())
	}

	// No pod restarted; each kept Calico's address, now routed's.
	for _, p := range pods {
		p.unchanged(t, c, ctx)
		if out := routedctl("ipam", "show", "--ip", p.ip); !strings.Contains(out, p.calicoHandle) {
			t.Errorf("%s is not held by Calico's handle %s in routed's IPAM:\n%s", p.ip, p.calicoHandle, out)
		}
	}
	if out := routedctl("ipam", "check"); !strings.Contains(out, "No IPAM problems found") {
		t.Errorf("ipam check after the switch:\n%s", out)
	}

	// A new pod on a switched node, through routed's CNI: an address from
	// that node's migrated block, and traffic with the old pods.
	fresh := &kubeletPod{name: "fresh-1", node: c.Nodes[1]}
	fresh.create(t, c, ctx)
	fresh.running(t, c, ctx)
	if _, ok := fresh.annotations["cni.projectcalico.org/podIP"]; ok {
		t.Errorf("the new pod was set up by Calico's plugin, not routed's")
	}
	inBlock := false
	for _, b := range blocks[fresh.node.Name] {
		inBlock = inBlock || b.Contains(netip.MustParseAddr(fresh.ip))
	}
	if !inBlock {
		t.Errorf("new pod on %s got %s, outside its migrated blocks %v", fresh.node.Name, fresh.ip, blocks[fresh.node.Name])
	}
	if err := lab.TCPListen(ctx, fresh.lab, openPort); err != nil {
		t.Fatal(err)
	}
	for _, old := range []lab.Pod{web, db} {
		for _, pr := range [][2]lab.Pod{{fresh.lab, old}, {old, fresh.lab}} {
			testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
				if !reaches(t, pr[0], pr[1].IP, openPort) {
					return fmt.Sprintf("%s (%s) cannot reach %s (%s):%d", pr[0].Name, pr[0].IP, pr[1].Name, pr[1].IP, openPort)
				}
				return ""
			})
		}
	}
	if reaches(t, web, db.IP, npDenied) {
		t.Errorf("%s reached %s:%d, which the migrated NetworkPolicy denies", web.Name, db.Name, npDenied)
	}
	if !reaches(t, fresh.lab, db.IP, npDenied) {
		t.Errorf("%s cannot reach %s:%d (the NetworkPolicy denies only web-1)", fresh.name, db.Name, npDenied)
	}

	// A pod Calico set up, deleted once routed runs: routed's CNI DEL
	// releases its address and removes Calico's device.
	pods[0].remove(t, c, ctx)
	testenv.Eventually(t, 30*time.Second, 500*time.Millisecond, func() string {
		out, err := demo.Routedctl(ctx, c, bin, "ipam", "show", "--ip", pods[0].ip)
		if err != nil || !strings.Contains(out, pods[0].ip+" is not allocated") {
			return fmt.Sprintf("%s still allocated after %s was deleted: %v\n%s", pods[0].ip, pods[0].name, err, out)
		}
		return ""
	})
	if out, err := c.NodeExecOn(ctx, pods[0].node, "ip", "link", "show", "dev", calicoVeth("shop", pods[0].name)); err == nil {
		t.Errorf("%s's host device is left after its deletion:\n%s", pods[0].name, out)
	}
	if out := routedctl("ipam", "check"); !strings.Contains(out, "No IPAM problems found") {
		t.Errorf("ipam check after deleting %s:\n%s", pods[0].name, out)
	}
	phase("checked")
}
