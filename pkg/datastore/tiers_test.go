package datastore

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func newTier(name string, order float64) *api.Tier {
	return &api.Tier{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindTier},
		Metadata: api.ObjectMeta{Name: name}, Spec: api.TierSpec{Order: &order}}
}

func newGNP(name, tier string) *api.GlobalNetworkPolicy {
	p := &api.GlobalNetworkPolicy{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy},
		Metadata: api.ObjectMeta{Name: name}}
	p.Spec.Tier = tier
	return p
}

// TestTierGuards: a policy naming a missing tier is refused and nothing
// is written; a tier with policies, or one of the three that always
// exist, cannot be deleted; the default tiers are created once however
// many nodes race to create them.
func TestTierGuards(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.EnsureDefaultTiers(ctx) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("EnsureDefaultTiers raced: %v", err)
		}
	}
	tiers, _, err := c.List(ctx, api.KindTier)
	if err != nil || len(tiers) != 3 {
		t.Fatalf("tiers after ensure: %v, %v", names(tiers), err)
	}

	_, err = c.Create(ctx, newGNP("p1", "security"))
	if !errors.Is(err, ErrUnknownTier) || !strings.Contains(err.Error(), `spec.tier "security"`) {
		t.Fatalf("policy in a missing tier: %v", err)
	}
	if _, err := c.Get(ctx, api.KindGlobalNetworkPolicy, "p1"); !IsNotFound(err) {
		t.Fatalf("refused policy was written: %v", err)
	}
	// Apply (create or update) goes through the same check.
	if _, err := c.Apply(ctx, newGNP("p1", "security")); !errors.Is(err, ErrUnknownTier) {
		t.Fatalf("apply into a missing tier: %v", err)
	}

	if _, err := c.Create(ctx, newTier("security", 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, newGNP("p1", "security")); err != nil {
		t.Fatal(err)
	}
	err = c.Delete(ctx, api.KindTier, "security", "")
	if !errors.Is(err, ErrTierInUse) || !strings.Contains(err.Error(), "GlobalNetworkPolicy p1") {
		t.Fatalf("deleting a tier with a policy: %v", err)
	}
	if err := c.Delete(ctx, api.KindTier, "default", ""); !errors.Is(err, ErrTierInUse) {
		t.Fatalf("deleting the default tier: %v", err)
	}
	// Moving a policy to a missing tier is refused like creating it.
	p, err := c.Get(ctx, api.KindGlobalNetworkPolicy, "p1")
	if err != nil {
		t.Fatal(err)
	}
	p.(*api.GlobalNetworkPolicy).Spec.Tier = "nope"
	if _, err := c.Update(ctx, p); !errors.Is(err, ErrUnknownTier) {
		t.Fatalf("update into a missing tier: %v", err)
	}
	if err := c.Delete(ctx, api.KindGlobalNetworkPolicy, "p1", ""); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, api.KindTier, "security", ""); err != nil {
		t.Fatalf("deleting an empty tier: %v", err)
	}
}

func names(rs []api.Resource) []string {
	var out []string
	for _, r := range rs {
		out = append(out, api.StoreName(r))
	}
	return out
}
