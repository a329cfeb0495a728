package k8s_test

import (
	"context"
	"testing"
	"time"

	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/enforce"
)

// podStartEnforced is the pod-start check of `make k8s-enforce`
// (enforce.PodStart) on TestRealNodeRunsRouted's cluster: a pod created
// in a namespace with a default-deny ingress policy answers none of the
// probes sent from both nodes from before it exists until 5 s after it
// is Running; a pod without policy answers within 2 s of Running.
func podStartEnforced(ctx context.Context, t *testing.T, c *k8scluster.Cluster, bin string) {
	start := time.Now()
	e, err := enforce.NewEnv(c, bin, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	f, err := e.NewClients(ctx, "podstart-clients")
	if err != nil {
		t.Fatalf("probe clients: %v", err)
	}
	defer f.Close()
	if err := e.PodStart(ctx, f, "podstart", enforce.PodStartIPs); err != nil {
		t.Error(err)
	}
	t.Logf("pod start enforced in %s", time.Since(start).Round(time.Second))
}
