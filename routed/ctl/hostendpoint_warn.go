package ctl

import (
	"context"
	"fmt"
	"io"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// Host endpoints that do not apply as written (a second one for an
// interface, a doNotTrack policy on a "*" one) are legal, and felix
// logs them on their node; routedctl says so where an operator looks:
// after the host endpoint table, and in policy explain for a flow that
// involves them. Both come from policy.Calc.HostEndpointWarnings over
// a model of the datastore, the same rule felix applies. One found by
// its expectedIPs alone is not judged here: which interface holds the
// address is known on its node only.

// printHostEndpointWarnings writes, for a listing of every host
// endpoint, a warning line per endpoint not enforced as written; the
// global policies are read for their doNotTrack flags.
func printHostEndpointWarnings(ctx context.Context, errOut io.Writer, c *datastore.Client, heps []api.Resource) error {
	if len(heps) == 0 {
		return nil
	}
	gnps, _, err := c.List(ctx, api.KindGlobalNetworkPolicy)
	if err != nil {
		return err
	}
	m := policy.NewModel()
	for _, r := range append(gnps, heps...) {
		if err := setModel(m, r); err != nil {
			fmt.Fprintf(errOut, "warning: %s %s not taken as written, as felix does not take it: %v\n", r.GetKind(), api.StoreName(r), err)
		}
	}
	for _, w := range m.HostEndpointWarnings() {
		fmt.Fprintf(errOut, "warning: %s\n", w)
	}
	return nil
}

// setModel gives the explain model one resource: HostEndpoints as
// their nodes' own (policy.Calc.SetHostEndpointOfNode), the rest with
// SetResource.
func setModel(m *policy.Calc, r api.Resource) error {
	if h, ok := r.(*api.HostEndpoint); ok {
		return m.SetHostEndpointOfNode(h)
	}
	return m.SetResource(r)
}

// flowHostWarnings are the model's host endpoint warnings about the
// host endpoints a flow's decisions name: the endpoint itself, or the
// one it shadows.
func flowHostWarnings(m *policy.Calc, x policy.Explanation) []policy.HostEndpointWarning {
	var out []policy.HostEndpointWarning
	for _, w := range m.HostEndpointWarnings() {
		for _, d := range []policy.Decision{x.Egress, x.Ingress} {
			if d.Rule.Kind == policy.KindHostNotExplained &&
				(d.Endpoint == policy.HostEndpointKey(w.Endpoint) || d.Endpoint == policy.HostEndpointKey(w.ShadowedBy)) {
				out = append(out, w)
				break
			}
		}
	}
	return out
}
