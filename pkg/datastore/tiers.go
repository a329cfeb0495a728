package datastore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
)

// ErrUnknownTier is returned for a policy whose spec.tier names no Tier.
var ErrUnknownTier = errors.New("datastore: unknown tier")

// ErrTierInUse is returned when deleting a tier that still has policies,
// or one of the tiers that always exist.
var ErrTierInUse = errors.New("datastore: tier in use")

// EnsureDefaultTiers creates the tiers that always exist (kube-admin,
// default, kube-baseline; api.DefaultTiers) when they are missing, and
// leaves existing ones alone. Any number of nodes and routedctl may run
// it at once: losing a create race is success.
func (c *Client) EnsureDefaultTiers(ctx context.Context) error {
	for _, t := range api.DefaultTiers() {
		_, err := c.Create(ctx, t)
		if err != nil && !errors.Is(err, ErrExists) {
			return fmt.Errorf("create tier %s: %w", t.Metadata.Name, err)
		}
		if err == nil {
			log.WithField("tier", t.Metadata.Name).Info("created tier")
		}
	}
	return nil
}

// writeGuards returns the comparisons a write of r must hold besides
// its own (first): no overlapping pool appeared; a policy's tier still
// exists. Checks that fail now return their clear error here.
func (c *Client) writeGuards(ctx context.Context, r api.Resource, own clientv3.Cmp) ([]clientv3.Cmp, error) {
	cmps := []clientv3.Cmp{own}
	switch r := r.(type) {
	case *api.IPPool:
		guard, err := c.poolOverlapGuard(ctx, r)
		if err != nil {
			return nil, err
		}
		cmps = append(cmps, guard)
	case api.Policy:
		tier := r.Policy().Tier
		if _, err := c.Get(ctx, api.KindTier, tier); err != nil {
			if IsNotFound(err) {
				return nil, objErr(r.GetKind(), api.StoreName(r), fmt.Errorf("%w: spec.tier %q: no such Tier (routedctl get tiers lists them; create the tier first)", ErrUnknownTier, tier))
			}
			return nil, err
		}
		// The tier must still exist when the policy is written.
		cmps = append(cmps, clientv3.Compare(clientv3.Version(Key(api.KindTier, tier)), ">", 0))
	}
	return cmps, nil
}

// tierUnusedGuard refuses deleting a tier that always exists or still
// has policies, and returns the comparisons that keep it so: no policy
// was written since the policies were read.
func (c *Client) tierUnusedGuard(ctx context.Context, tier string) ([]clientv3.Cmp, error) {
	for _, t := range api.DefaultTiers() {
		if t.Metadata.Name == tier {
			return nil, objErr(api.KindTier, tier, fmt.Errorf("%w: the %s tier always exists and cannot be deleted", ErrTierInUse, tier))
		}
	}
	var cmps []clientv3.Cmp
	var users []string
	for _, k := range []api.Kind{api.KindNetworkPolicy, api.KindGlobalNetworkPolicy} {
		list, rev, err := c.List(ctx, k)
		if err != nil {
			return nil, err
		}
		for _, r := range list {
			if r.(api.Policy).Policy().Tier == tier {
				users = append(users, string(k)+" "+api.StoreName(r))
			}
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(KindPrefix(k)).WithPrefix(), "<", rev+1))
	}
	if n := len(users); n > 0 {
		sort.Strings(users)
		more := ""
		if len(users) > 10 {
			more = fmt.Sprintf(" and %d more", len(users)-10)
			users = users[:10]
		}
		return nil, objErr(api.KindTier, tier, fmt.Errorf("%w: %d policies are in it (%s%s); delete or move them first", ErrTierInUse, n, strings.Join(users, ", "), more))
	}
	return cmps, nil
}
