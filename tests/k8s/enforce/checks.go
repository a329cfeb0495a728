package enforce

import (
	"context"
	"time"
)

// PodStartIPs are the pool addresses the pod-start checks pin their
// pods to (nothing else in the cluster asks for them).
var PodStartIPs = [4]string{"192.168.99.10", "192.168.99.11", "192.168.99.12", "192.168.99.13"}

// Checks runs the pod-start check and the restart-order check on a
// fixture in namespace "enforce".
func (e *Env) Checks(ctx context.Context) error {
	f, err := e.NewFixture(ctx, "enforce")
	if err != nil {
		return err
	}
	defer f.Close()
	start := time.Now()
	e.Logf("==> pod start: default-deny and open namespaces, probes from before the pods exist")
	if err := e.PodStart(ctx, f, "podstart", PodStartIPs); err != nil {
		return err
	}
	e.Logf("    pod start checks passed in %s", time.Since(start).Round(time.Second))
	start = time.Now()
	e.Logf("==> restart order: routed, routed-controllers and CNI ADDs, alone and together, under continuous probes")
	if err := e.Restarts(ctx, f); err != nil {
		return err
	}
	e.Logf("    restart checks passed in %s", time.Since(start).Round(time.Second))
	return nil
}
