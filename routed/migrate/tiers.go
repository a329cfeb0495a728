package migrate

import (
	"context"
	"fmt"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// withTiers drops from carried the policies whose tier neither comes
// along, nor exists in routed, nor is one of the tiers routed always
// has, and says why for each: written, they would be refused.
func withTiers(ctx context.Context, to *datastore.Client, carried []api.Resource) ([]api.Resource, []string, error) {
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
	var skipped []string
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
			skipped = append(skipped, fmt.Sprintf("%s %s: its tier %q is in neither datastore", r.GetKind(), api.StoreName(r), p.Policy().Tier))
		default:
			return nil, nil, err
		}
	}
	return out, skipped, nil
}
