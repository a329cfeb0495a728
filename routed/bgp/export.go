package bgp

import (
	"context"
	"slices"

	api "github.com/osrg/gobgp/v4/api"
)

// ownOnlyPolicy names the export policy (and its neighbor set) that
// limits eBGP peers to this node's own routes.
const ownOnlyPolicy = "routed-ebgp-own-routes"

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
// ownRoutesOnly.
func (s *Speaker) applyOwnRoutesOnly(ctx context.Context, peers []Peer) error {
	if s.running == nil {
		return nil
	}
	reject := func(suffix string, rt api.Conditions_RouteType) *api.Statement {
		return &api.Statement{
			Name:       ownOnlyPolicy + suffix,
			Conditions: &api.Conditions{RouteType: rt},
			Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT},
		}
	}
	stmts := []*api.Statement{
		reject("-internal", api.Conditions_ROUTE_TYPE_INTERNAL),
		reject("-external", api.Conditions_ROUTE_TYPE_EXTERNAL),
	}
	return s.applyNeighborPolicy(ctx, ownOnlyPolicy, ownRoutesOnly(peers, s.running.ASN), stmts, &s.ownOnly)
}
