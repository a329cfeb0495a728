package felix_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// TestUnreadableAndRefusedKeepTheirDeny: felix's loop keeps a deny for
// a record the feed reports unreadable until the record is set or
// deleted, or a snapshot no longer reports it; a record it refuses with
// nothing of it in force (a GlobalNetworkSet with a net that is no
// CIDR) is denied for too, also after a snapshot, whose list of
// unreadable records does not end that deny; set valid, it ends.
func TestUnreadableAndRefusedKeepTheirDeny(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.Features.DisablePolicy = false })
	gns := func(nets ...string) *api.GlobalNetworkSet {
		s := &api.GlobalNetworkSet{TypeMeta: api.TypeMeta{Kind: api.KindGlobalNetworkSet}, Metadata: api.ObjectMeta{Name: "bad-nets"}}
		s.Spec.Nets = nets
		return s
	}
	wait := func(what string, want ...string) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			var got []string
			for _, r := range h.f.UnreadableRecords() {
				got = append(got, string(r.Kind)+"/"+r.Name)
			}
			if slices.Equal(got, want) {
				return ""
			}
			return fmt.Sprintf("%s: unreadable records %v, want %v", what, got, want)
		})
	}
	rs := resources(gns("10.0.0.0/8", "not-a-cidr"))
	rs[api.KindGlobalNetworkSet] = rs[api.KindGlobalNetworkSet][:1]
	h.f.ReplaceResources(rs)
	h.f.ReplaceUnreadable([]feed.Update{{Kind: api.KindNetworkPolicy, Name: "prod.broken", Unreadable: errors.New("for the test")}})
	wait("first snapshot", "GlobalNetworkSet/bad-nets", "NetworkPolicy/prod.broken")

	// A later snapshot: the refused set is still refused and still
	// denied for; the NetworkPolicy is no longer reported.
	h.f.ReplaceResources(resources(gns("10.0.0.0/8", "not-a-cidr")))
	h.f.ReplaceUnreadable(nil)
	wait("second snapshot", "GlobalNetworkSet/bad-nets")

	// A snapshot without the refused set (deleted during a resync):
	// its deny goes with it.
	empty := resources()
	empty[api.KindGlobalNetworkSet] = nil // the kind in the snapshot, none of it
	h.f.ReplaceResources(empty)
	h.f.ReplaceUnreadable(nil)
	wait("refused set gone from the snapshot")
	h.f.ReplaceResources(resources(gns("10.0.0.0/8", "not-a-cidr")))
	h.f.ReplaceUnreadable(nil)
	wait("refused set back", "GlobalNetworkSet/bad-nets")

	// Live: the set fixed, a policy going unreadable, then deleted.
	h.f.SetResource(gns("10.0.0.0/8"))
	h.f.SetUnreadable(feed.Update{Kind: api.KindGlobalNetworkPolicy, Name: "g", Unreadable: errors.New("for the test")})
	wait("set fixed, policy unreadable", "GlobalNetworkPolicy/g")
	h.f.DeleteResource(api.KindGlobalNetworkPolicy, "g")
	wait("policy deleted")
}
