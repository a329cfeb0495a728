package daemon

import (
	"context"

	"github.com/routed-net/routed/routed/cnitoken"
)

// startCNIToken runs the CNI token refresher (routed/cnitoken) with
// routed's in-cluster identity until the returned stop is called.
func startCNIToken(ctx context.Context, c CNITokenConfig) (stop func(), err error) {
	tc, err := cnitoken.InCluster(c.Kubeconfig, c.Namespace, c.ServiceAccount)
	if err != nil {
		return nil, err
	}
	tc.Validity, tc.RefreshBefore = c.Validity, c.RefreshBefore
	tc.Log = log.WithField("component", "cnitoken")
	if err := tc.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() { errc <- cnitoken.Run(ctx, tc) }()
	return func() { cancel(); <-errc }, nil
}
