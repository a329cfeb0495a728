package demo

import (
	"context"
	"os"
	"path/filepath"

	"github.com/routed-net/routed/tests/k8s/cluster"
)

// UpWithRouted brings up the demo cluster in dir/cluster (Up), installs
// routed from the shipped manifests (Install) and, with crds, the CRDs
// routed ships (InstallCRDs): what the make targets that run something
// on a cluster with routed share. down removes what was made (call it
// also when err is set); root is the repository, bin holds routed's
// binaries.
func UpWithRouted(ctx context.Context, dir, root, bin string, crds bool, logf func(string, ...any)) (c *cluster.Cluster, down func(), err error) {
	var overlay string
	down = func() {
		if overlay != "" {
			os.RemoveAll(overlay)
		}
		if c != nil {
			logf("==> tearing the cluster down")
			c.Down()
		}
	}
	if c, err = Up(ctx, filepath.Join(dir, "cluster"), bin, logf); err != nil {
		return c, down, err
	}
	if overlay, err = Install(ctx, c, root, bin, logf); err != nil {
		return c, down, err
	}
	if crds {
		err = InstallCRDs(ctx, c, root)
	}
	return c, down, err
}

// InstallCRDs applies the CRDs routed ships (deploy/crds under root: the
// ClusterNetworkPolicy of sigs.k8s.io/network-policy-api) and waits
// until the API server serves them; routed-controllers start watching
// ClusterNetworkPolicies once it does.
func InstallCRDs(ctx context.Context, c *cluster.Cluster, root string) error {
	crds := filepath.Join(root, "deploy", "crds")
	if _, err := c.Kubectl(ctx, "apply", "-f", crds); err != nil {
		return err
	}
	_, err := c.Kubectl(ctx, "wait", "--for", "condition=Established", "--timeout", "2m", "-f", crds)
	return err
}
