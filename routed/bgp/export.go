package bgp

import (
	"context"
	"fmt"
	"slices"

	api "github.com/osrg/gobgp/v3/api"
)

// Names of the export policy that limits eBGP peers to this node's own
// routes.
const (
	ownOnlySet    = "routed-ebgp-own-routes"
	ownOnlyPolicy = "routed-ebgp-own-routes"
)

// ownRoutesOnly lists the peers that get only routes this node originates:
// every eBGP peer that did not ask for keepOriginalNextHop. Re-advertising
// what a node learned from its cluster with itself as next hop makes an
// external router send traffic for another node's block through this
// node, and, when that node is on another subnet, back through the router:
// a loop. Each node is authoritative for its own blocks, so the router
// learns each block from its owner.
func ownRoutesOnly(peers []Peer, localASN uint32) []string {
	var out []string
	for _, p := range peers {
		if p.Address.IsValid() && p.ASN != localASN && !p.KeepOriginalNextHop {
			out = append(out, p.Address.String()+"/32")
		}
	}
	slices.Sort(out)
	return out
}

// applyOwnRoutesOnly installs or updates the global export policy that
// rejects learned (iBGP or eBGP) routes towards the peers from
// ownRoutesOnly. GoBGP only has global policies for ordinary peers, so
// the policy matches a neighbor set.
func (s *Speaker) applyOwnRoutesOnly(ctx context.Context, peers []Peer) error {
	if s.running == nil {
		return nil
	}
	want := ownRoutesOnly(peers, s.running.ASN)
	if slices.Equal(want, s.ownOnly) {
		return nil
	}
	if len(want) == 0 {
		_ = s.bgp.DeletePolicyAssignment(ctx, &api.DeletePolicyAssignmentRequest{
			Assignment: &api.PolicyAssignment{Name: "global", Direction: api.PolicyDirection_EXPORT,
				Policies: []*api.Policy{{Name: ownOnlyPolicy}}}})
		_ = s.bgp.DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: ownOnlyPolicy}, All: true})
		_ = s.bgp.DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{
			DefinedSet: &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: ownOnlySet}, All: true})
		s.ownOnly = nil
		return nil
	}
	set := &api.DefinedSet{DefinedType: api.DefinedType_NEIGHBOR, Name: ownOnlySet, List: want}
	if err := s.bgp.AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set, Replace: true}); err != nil {
		return fmt.Errorf("bgp: own-routes neighbor set: %w", err)
	}
	if s.ownOnly == nil {
		reject := func(name string, rt api.Conditions_RouteType) *api.Statement {
			return &api.Statement{
				Name: name,
				Conditions: &api.Conditions{
					NeighborSet: &api.MatchSet{Name: ownOnlySet, Type: api.MatchSet_ANY},
					RouteType:   rt,
				},
				Actions: &api.Actions{RouteAction: api.RouteAction_REJECT},
			}
		}
		pol := &api.Policy{Name: ownOnlyPolicy, Statements: []*api.Statement{
			reject(ownOnlyPolicy+"-internal", api.Conditions_ROUTE_TYPE_INTERNAL),
			reject(ownOnlyPolicy+"-external", api.Conditions_ROUTE_TYPE_EXTERNAL),
		}}
		if err := s.bgp.AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
			return fmt.Errorf("bgp: own-routes policy: %w", err)
		}
		err := s.bgp.AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: api.PolicyDirection_EXPORT,
			Policies: []*api.Policy{{Name: ownOnlyPolicy}}, DefaultAction: api.RouteAction_ACCEPT,
		}})
		if err != nil {
			return fmt.Errorf("bgp: own-routes policy assignment: %w", err)
		}
	}
	s.ownOnly = want
	return nil
}
