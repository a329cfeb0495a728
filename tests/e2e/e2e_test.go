// Package e2e runs the whole product as a user would: the lab of network
// namespaces, an embedded etcd, routed on every node, BIRD as the router,
// and pods created through the real CNI plugin. Needs root.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/tests/lab"
	"github.com/routed-net/routed/tests/testbin"

	"github.com/routed-net/routed/internal/testenv"
)

// startLab brings up a lab unique to this test and tears it down after.
func startLab(t testing.TB) *lab.Lab { return startLabWith(t, nil) }

// startLabWith is startLab with a change to the default topology.
func startLabWith(t testing.TB, mutate func(*lab.Topology)) *lab.Lab {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces")
	cnitool, err := exec.LookPath("cnitool")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		cnitool = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "cnitool")
		if _, err := os.Stat(cnitool); err != nil {
			t.Fatalf("cnitool not found; run tests/ensure-deps.sh (make deps)")
		}
	}
	bins := lab.Binaries{
		Routed: testbin.Path(t, "routed"), Routedctl: testbin.Path(t, "routedctl"),
		RoutedCNI: testbin.Path(t, "routed-cni"), RoutedIPAM: testbin.Path(t, "routed-ipam"),
		Cnitool: cnitool,
	}
	// routed-cni and routed-ipam must sit in one directory: it is CNI_PATH.
	if filepath.Dir(bins.RoutedCNI) != filepath.Dir(bins.RoutedIPAM) {
		t.Fatalf("routed-cni and routed-ipam are in different directories")
	}
	idx := lab.ClaimIndex(t)
	prefix := fmt.Sprintf("re%d", idx)
	topo := lab.DefaultTopology(prefix, idx)
	if mutate != nil {
		mutate(&topo)
	}
	dir := t.TempDir()
	l := lab.New(topo, bins, dir, t.Logf)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Cleanup(func() {
		if t.Failed() {
			dumpLogs(t, dir)
		}
		l.Down(context.Background())
	})
	if err := l.Up(ctx); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	return l
}

func dumpLogs(t testing.TB, dir string) {
	_ = filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && strings.HasSuffix(p, ".log") {
			b, _ := os.ReadFile(p)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("---- %s (tail)\n%s", p, b)
		}
		return nil
	})
}

// TestLabEndToEnd: every pod reaches every other pod, node routes have
// the expected shape, and IPAM usage matches the pods.
func TestLabEndToEnd(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	var out strings.Builder
	rep := lab.Check(ctx, l, 2, &out)
	t.Log(out.String())
	if !rep.OK() {
		t.Fatalf("lab check failed: %s", rep)
	}

	// Route shapes: a local pod is a /32 on its cali device; the node's own
	// block is a blackhole; a block on the same subnet goes straight to
	// that node; a block across subnets goes through the router.
	pods := l.Pods()
	byNode := map[string][]lab.Pod{}
	for _, p := range pods {
		byNode[p.Node] = append(byNode[p.Node], p)
	}
	n1, n2, n3 := l.Topo.Nodes[0], l.Topo.Nodes[1], l.Topo.Nodes[2]
	routes, err := l.NodeRoutes(ctx, n1.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range byNode[n1.Name] {
		if !hasLine(routes, p.IP+" dev cali", "proto 82", "scope link") {
			t.Errorf("%s: no /32 route for local pod %s:\n%s", n1.Name, p.IP, routes)
		}
	}
	if !hasLine(routes, "blackhole ", "proto 82") {
		t.Errorf("%s: no blackhole for its own block:\n%s", n1.Name, routes)
	}
	if !hasLine(routes, "via "+n2.Addr.Addr().String(), "proto 82") {
		t.Errorf("%s: no direct route to same-subnet node %s's block:\n%s", n1.Name, n2.Name, routes)
	}
	rtrA := strings.TrimSuffix(l.Topo.SubnetA.Addr().String(), "0") + "1"
	if !hasLine(routes, "via "+rtrA, "proto 82") {
		t.Errorf("%s: no route through the router %s to cross-subnet node %s's block:\n%s", n1.Name, rtrA, n3.Name, routes)
	}

	// Health and metrics: every node ready, and its metrics show the
	// routes felix programmed and the IPAM usage.
	for _, node := range l.Topo.Nodes {
		// Readiness follows the sessions the pings just used; wait for
		// it (a session may still be settling) rather than sample once.
		testenv.Eventually(t, 30*time.Second, 250*time.Millisecond, func() string {
			body, err := l.NodeHTTP(ctx, node.Name, 9099, "/readiness")
			if err != nil || !strings.Contains(body, `"felix"`) || !strings.Contains(body, `"bgp"`) {
				return fmt.Sprintf("%s: /readiness not 200 with its components: %v\n%s", node.Name, err, body)
			}
			return ""
		})
		if _, err := l.NodeHTTP(ctx, node.Name, 9099, "/liveness"); err != nil {
			t.Errorf("%s: /liveness: %v", node.Name, err)
		}
		// The lab's etcd is the embedded 3.6: its version logged, no warning.
		testenv.Eventually(t, 30*time.Second, 250*time.Millisecond, func() string {
			b, err := os.ReadFile(l.NodeLog(node.Name))
			if err != nil || !regexp.MustCompile(`level=info msg="etcd version" .*version=3\.6\.`).Match(b) {
				return fmt.Sprintf("%s: no \"etcd version\" line for 3.6 in its log (%v)", node.Name, err)
			}
			return ""
		})
		m, err := l.NodeMetricFamilies(ctx, node.Name)
		if err != nil || !m.HasPrefix("routed_felix_") || !m.HasPrefix("routed_ipam_") {
			t.Errorf("%s: /metrics lacks felix or IPAM metrics: %v", node.Name, err)
		}
	}

	// The cluster's IPAM usage: exported by the elected GC node alone,
	// as many addresses in use as pods, accounted at each scrape from
	// its feed's block tallies: a pod added and then deleted shows in
	// the count within seconds both times, where a read of every block
	// serves the next minute's scrapes.
	usage := func() (leaders []string, inUse float64) {
		for _, node := range l.Topo.Nodes {
			m, err := l.NodeMetricFamilies(ctx, node.Name)
			if err != nil {
				t.Fatalf("%s: /metrics: %v", node.Name, err)
			}
			if n, ok := m.Sum("routed_ipam_allocations_in_use", nil); ok {
				leaders, inUse = append(leaders, node.Name), n
			}
		}
		return leaders, inUse
	}
	waitUsage := func(what string, want int, within time.Duration) {
		t.Helper()
		testenv.Eventually(t, within, 250*time.Millisecond, func() string {
			if leaders, inUse := usage(); len(leaders) != 1 || inUse != float64(want) {
				return fmt.Sprintf("%s: IPAM usage exported by %v: %v in use, want %d by one node", what, leaders, inUse, want)
			}
			return ""
		})
	}
	waitUsage("the lab's pods", len(pods), 60*time.Second)
	extra, err := l.AddPod(ctx, n1.Name, "usage-pod")
	if err != nil {
		t.Fatal(err)
	}
	waitUsage("a pod added", len(pods)+1, 10*time.Second)
	if err := l.DelPod(ctx, extra); err != nil {
		t.Fatal(err)
	}
	waitUsage("the pod deleted", len(pods), 10*time.Second)

	// IPAM: as many addresses in use as pods.
	show, err := l.Ctl(ctx, "ipam", "show")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(show, fmt.Sprint(len(pods))) {
		t.Errorf("ipam show does not report %d addresses in use:\n%s", len(pods), show)
	}
	weps, err := l.Ctl(ctx, "get", "workloadendpoints")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(weps, "\n") - 1; got != len(pods) {
		t.Errorf("%d workload endpoints for %d pods:\n%s", got, len(pods), weps)
	}
}

// hasLine reports whether some line of text contains every part.
func hasLine(text string, parts ...string) bool {
	for _, line := range strings.Split(text, "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(line, p)
		}
		if ok {
			return true
		}
	}
	return false
}

// TestDedicatedRouteReflector: n1 runs `routed --role route-reflector`
// (BGP only). It reflects every block between the nodes, programs no
// routes itself, and pods on the other nodes reach each other.
func TestDedicatedRouteReflector(t *testing.T) {
	l := startLabWith(t, func(topo *lab.Topology) { topo.Nodes[0].Dedicated = true })
	ctx := context.Background()
	var out strings.Builder
	rep := lab.Check(ctx, l, 1, &out)
	t.Log(out.String())
	if !rep.OK() || rep.Pods != 3 {
		t.Fatalf("lab check with a dedicated route reflector: %s", rep)
	}
	rr := l.Topo.Nodes[0].Name
	routes, err := l.NodeRoutes(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(routes, "proto 82") {
		t.Errorf("the route-reflector role programmed routes (it runs no felix):\n%s", routes)
	}
	shown, err := l.NodeCtl(ctx, rr, "show", "route")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Topo.Nodes[1:] {
		if !strings.Contains(shown, n.Addr.Addr().String()) {
			t.Errorf("route reflector has no route from %s:\n%s", n.Name, shown)
		}
	}
}
