package bgp

import (
	"context"

	api "github.com/osrg/gobgp/v4/api"
)

// Routes a pod advertises to its node (BGPPeer localWorkloadSelector)
// stay on that node. Calico's BIRD exports them to no other peer: every
// session's export filter ends in calico_export_to_bgp_peers(), which
// accepts the node's own blocks, its static and service routes and
// routes inside enabled pools, then rejects; a pod's route outside the
// pools matches none of them, whether the peer is iBGP (mesh, route
// reflector) or eBGP (a ToR). GoBGP would re-advertise them to every
// iBGP peer, which refuse them (felix's cluster-peer-outside-pools).
//
// GoBGP exports from one RIB and its export policies see the receiving
// peer, never the one a route came from, so the origin travels with the
// route: an import policy limited to the NoAdvertise peers adds the
// well-known community NO_ADVERTISE (RFC 1997), and an export policy for
// every peer rejects learned routes that carry it. GoBGP does not honour
// NO_ADVERTISE itself; BIRD does, so a learned route a peer marked
// NO_ADVERTISE is kept from the other peers too, as in Calico. Routes
// this node originates are not matched: Calico's BIRD adds the
// communities of prefixAdvertisements in its export filter, after its
// NO_ADVERTISE check, and sends them.

const (
	// noAdvertiseMarkPolicy names the import policy (and its neighbor
	// set) that marks every route from a NoAdvertise peer NO_ADVERTISE.
	noAdvertiseMarkPolicy = "routed-no-advertise-mark"
	// noAdvertisePolicy names the export policy (and its community set)
	// that keeps learned NO_ADVERTISE routes from every peer.
	noAdvertisePolicy = "routed-no-advertise"
	// noAdvertise is the well-known community NO_ADVERTISE, 0xFFFFFF02.
	noAdvertise = "65535:65282"
)

// applyNoAdvertise installs the export policy (once per BGP server, for
// every peer) and keeps the marking import policy on the NoAdvertise
// peers. Both come before any session that needs them is added.
func (s *Speaker) applyNoAdvertise(ctx context.Context, peers []Peer) error {
	if s.running == nil {
		return nil
	}
	if !s.noAdvertiseOn {
		set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_COMMUNITY, Name: noAdvertisePolicy, List: []string{"^" + noAdvertise + "$"}}
		reject := func(suffix string, rt api.Conditions_RouteType) *api.Statement {
			return &api.Statement{
				Name: noAdvertisePolicy + suffix,
				Conditions: &api.Conditions{RouteType: rt,
					CommunitySet: &api.MatchSet{Name: noAdvertisePolicy, Type: api.MatchSet_TYPE_ANY}},
				Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT},
			}
		}
		pol := &api.Policy{Name: noAdvertisePolicy, Statements: []*api.Statement{
			reject("-internal", api.Conditions_ROUTE_TYPE_INTERNAL),
			reject("-external", api.Conditions_ROUTE_TYPE_EXTERNAL),
		}}
		if err := s.addOwnPolicy(ctx, exportDir, set, pol); err != nil {
			return err
		}
		s.noAdvertiseOn = true
	}
	stmts := []*api.Statement{{
		Name: noAdvertiseMarkPolicy,
		Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED,
			Community: &api.CommunityAction{Type: api.CommunityAction_TYPE_ADD, Communities: []string{noAdvertise}}},
	}}
	return s.applyNeighborPolicy(ctx, noAdvertiseMarkPolicy, peerPrefixes(peers, func(p Peer) bool { return p.NoAdvertise }), importDir, stmts, &s.noAdvMark)
}
