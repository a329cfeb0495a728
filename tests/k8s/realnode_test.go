package k8s_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/k8s/netpol"
	"github.com/routed-net/routed/tests/testbin"
)

// TestRealNodeRunsRouted is `make k8s-demo` as a test: a real two-node
// cluster (a kubelet and a containerd per node) installs routed from the
// shipped manifests, and the demo's checks pass: the DaemonSet Ready on
// both nodes, install-cni's files on each, 10 pods Running with pool
// addresses and WorkloadEndpoints, the ipAddrs annotation, pod-to-pod
// ping through kubectl exec across the nodes, the route reflector
// Deployment running as a pod on the second node and peering with the
// first, addresses released, no routed files left on either node.
// Between the install and those checks, on the same cluster, one of
// Kubernetes' own NetworkPolicy specs (netpolCI) passes with routed's
// controllers and policy dataplane; `make k8s-netpol` runs them all.
// Then the pod-start check of `make k8s-enforce` (podStartEnforced).
func TestRealNodeRunsRouted(t *testing.T) {
	skipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 18*time.Minute)
	defer cancel()
	api, node := kubeBinaries(ctx, t)
	e2e, agnhost, err := kubeapiserver.BuildE2E(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	routed := testbin.Path(t, "routed")
	testbin.Path(t, "routedctl")
	dir := t.TempDir()
	c, err := k8scluster.Up(ctx, k8scluster.Config{Dir: dir, Prefix: "rk8t", Subnet: netip.MustParsePrefix("10.252.0.0/24"), Nodes: 2,
		Routed: routed, KubeAPIServer: api, KubeNode: node, Logf: t.Logf})
	t.Cleanup(c.Down)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bin := filepath.Dir(routed)
	overlay, err := demo.Install(ctx, c, repoRoot(), bin, t.Logf)
	if overlay != "" {
		defer os.RemoveAll(overlay)
	}
	if err != nil {
		failOnCluster(t, c, "install", err)
	}
	t.Logf("routed installed in %s", time.Since(start).Round(time.Second))

	start = time.Now()
	res, err := netpol.Run(ctx, c, netpol.Config{E2E: e2e, Agnhost: agnhost, Focus: netpolCI, Dir: filepath.Join(dir, "netpol"), Progress: t.Logf})
	if err != nil {
		t.Fatalf("Kubernetes' NetworkPolicy specs: %v", err)
	}
	for _, s := range res.Failed {
		t.Errorf("FAILED %s\n%s", s.Name, s.Message)
	}
	if len(res.Passed) != netpolCISpecs {
		t.Errorf("%s: want %d passed", res.Summary(), netpolCISpecs)
	}
	t.Logf("%s in %s", res.Summary(), time.Since(start).Round(time.Second))

	podStartEnforced(ctx, t, c, bin)

	start = time.Now()
	if err := demo.Check(ctx, c, repoRoot(), bin, overlay, t.Logf); err != nil {
		failOnCluster(t, c, "demo checks", err)
	}
	t.Logf("routed checked on the real nodes in %s", time.Since(start).Round(time.Second))
}

// netpolCI picks the Kubernetes NetworkPolicy spec CI runs (TCP, 2-3
// minutes on the loaded development machine; `make k8s-netpol` runs all
// 47): ingress allowed only from a pod picked by a namespace selector
// and a pod selector together, so the controllers' namespace profiles,
// endpoint labels and converted policy all take part, across two nodes.
// The UDP and SCTP variants' names ("Netpol [LinuxOnly] ...") do not
// match.
const netpolCI = `Netpol NetworkPolicy between server and client should ` +
	`enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector`

// netpolCISpecs is how many specs netpolCI picks.
const netpolCISpecs = 1

// failOnCluster ends the test on err. The kubelet's log goes first, then
// the whole error, and the error's first line last: CI keeps only the
// head and the tail of a failing test's output (make test's summary: a
// test's last 40 lines), and the kubelet's log after the error pushed
// the reason out of both (CI 2026-12-02: the scale-up's failed sandboxes
// were listed above the kubelet's 40 lines).
func failOnCluster(t *testing.T, c *k8scluster.Cluster, step string, err error) {
	t.Helper()
	t.Logf("kubelet:\n%s", c.Logs("kubelet", 20))
	t.Logf("%s failed: %v", step, err)
	first, _, _ := strings.Cut(err.Error(), "\n")
	if len(first) > 1000 {
		first = first[:1000] + "..."
	}
	t.Fatalf("%s failed (whole error above): %s", step, first)
}
