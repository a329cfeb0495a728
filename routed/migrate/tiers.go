package migrate

import (
	"context"
	"fmt"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// withTiers drops from carried the policies whose tier neither comes
// along, nor exists in routed, nor is one of the tiers routed always
// has, and names each as a policy loss: written, they would be refused.
func withTiers(ctx context.Context, to *datastore.Client, carried []api.Resource) ([]api.Resource, []PolicyLoss, error) {
	tiers := map[string]bool{}
	for _, t := range api.DefaultTiers() {
		tiers[t.Metadata.Name] = true
	}
	for _, r := range carried {
		if r.GetKind() == api.KindTier {
			tiers[r.Meta().Name] = true
		}
	}
	var out []api.Resource
	var losses []PolicyLoss
	for _, r := range carried {
		p, ok := r.(api.Policy)
		if !ok || tiers[p.Policy().Tier] {
			out = append(out, r)
			continue
		}
		_, err := to.Get(ctx, api.KindTier, p.Policy().Tier)
		switch {
		case err == nil:
			tiers[p.Policy().Tier] = true
			out = append(out, r)
		case datastore.IsNotFound(err):
			losses = append(losses, PolicyLoss{Kind: string(r.GetKind()), Name: api.StoreName(r),
				Reason:      fmt.Sprintf("its tier %q is in neither datastore", p.Policy().Tier),
				Consequence: lossConsequence(r.GetKind(), resourceObject(r))})
		default:
			return nil, nil, err
		}
	}
	return out, losses, nil
}
