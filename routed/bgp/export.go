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
// every eBGP peer but those with keepOriginalNextHop whose keep-next-hop
// policy is installed (keepNH, address/32 or /128). Re-advertising
// what a node learned from its cluster with itself as next hop makes an
// external router send traffic for another node's block through this
// node, and, when that node is on another subnet, back through the router:
// a loop. Each node is authoritative for its own blocks, so the router
// learns each block from its owner. A peer that asks for
// keepOriginalNextHop stays limited until its policy is in: taken out
// at once, it got every learned route with next hop self for as long
// as GoBGP refused the policy.
func ownRoutesOnly(peers []Peer, localASN uint32, keepNH []string) []string {
	return ebgpPeers(peers, localASN, func(p Peer) bool {
		return !p.KeepOriginalNextHop || !slices.Contains(keepNH, hostPrefix(p.Address))
	})
}

// applyOwnRoutesOnly installs or updates the global export policy that
// rejects learned (iBGP or eBGP) routes towards the peers from
// ownRoutesOnly, given the keep-next-hop policy installed.
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
	return s.applyNeighborPolicy(ctx, ownOnlyPolicy, ownRoutesOnly(peers, s.running.ASN, s.keepNH), exportDir, stmts, &s.ownOnly)
}

// emptyPathPolicy names the import policy (and its neighbor set) that
// drops routes with an empty AS_PATH from eBGP peers.
const emptyPathPolicy = "routed-ebgp-empty-as-path"

// ebgpPeers lists the eBGP peers that match (address/32 or /128, sorted, once each); a nil
// match takes them all.
func ebgpPeers(peers []Peer, localASN uint32, match func(Peer) bool) []string {
	return peerPrefixes(peers, func(p Peer) bool { return p.external(localASN) && (match == nil || match(p)) })
}

// peerPrefixes lists the peers that match as a neighbor set wants them
// (address/32 or /128, sorted, once each).
func peerPrefixes(peers []Peer, match func(Peer) bool) []string {
	var out []string
	for _, p := range peers {
		if p.Address.IsValid() && match(p) {
			out = append(out, hostPrefix(p.Address))
		}
	}
	slices.Sort(out)
	return slices.Compact(out) // a changing session is listed as applied and as wanted
}

// applyEmptyPathReject drops routes whose AS_PATH is empty when they
// come from an eBGP peer. An external speaker always prepends its own AS
// (RFC 4271 section 5.1.2), so an empty path is malformed (RFC 7606
// section 7.2: treat as withdraw); GoBGP accepts it, and such a route
// would look like it came from this AS and win on path length.
func (s *Speaker) applyEmptyPathReject(ctx context.Context, peers []Peer) error {
	if s.running == nil {
		return nil
	}
	stmts := []*api.Statement{{
		Name:       emptyPathPolicy,
		Conditions: &api.Conditions{AsPathLength: &api.AsPathLength{Type: api.Comparison_COMPARISON_EQ, Length: 0}},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT},
	}}
	return s.applyNeighborPolicy(ctx, emptyPathPolicy, ebgpPeers(peers, s.running.ASN, nil), importDir, stmts, &s.emptyPath)
}
