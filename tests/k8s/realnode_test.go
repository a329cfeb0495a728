package k8s_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
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
func TestRealNodeRunsRouted(t *testing.T) {
	skipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	api, err := kubeapiserver.Build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubeapiserver.BuildNode(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	routed := testbin.Path(t, "routed")
	dir := t.TempDir()
	c, err := k8scluster.Up(ctx, k8scluster.Config{Dir: dir, Prefix: "rk8t", Subnet: netip.MustParsePrefix("10.252.0.0/24"), Nodes: 2,
		Routed: routed, KubeAPIServer: api, KubeNode: node, Logf: t.Logf})
	t.Cleanup(c.Down)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := demo.Run(ctx, c, repoRoot(), filepath.Dir(routed), t.Logf); err != nil {
		t.Fatalf("%v\nkubelet:\n%s", err, c.Logs("kubelet", 20))
	}
	t.Logf("routed installed and checked on the real node in %s", time.Since(start).Round(time.Second))
}
