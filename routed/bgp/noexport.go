package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v4/api"
)

// noExportPolicy names the export policy (and its prefix set) that keeps
// the routes of pools with disableBGPExport from every peer.
const noExportPolicy = "routed-no-export"

// SetNoExportCIDRs sets the CIDRs (Calico's IP pools with
// disableBGPExport) whose routes, and routes inside them, are sent to no
// BGP peer: neither this node's blocks nor routes learned from others.
// They stay in the local RIB.
func (s *Speaker) SetNoExportCIDRs(cidrs []netip.Prefix) {
	c := make([]netip.Prefix, 0, len(cidrs))
	for _, p := range cidrs {
		if p.IsValid() {
			c = append(c, p.Masked())
		}
	}
	slices.SortFunc(c, func(a, b netip.Prefix) int {
		if x := a.Addr().Compare(b.Addr()); x != 0 {
			return x
		}
		return a.Bits() - b.Bits()
	})
	c = slices.Compact(c)
	s.want.update(func() { s.want.noExport = c })
}

// applyNoExport installs, replaces or removes the global export policy
// rejecting routes inside the no-export CIDRs towards every peer. GoBGP
// statements hold the set they were made with, so a change re-creates
// policy and sets; the peers are then soft-reset so routes they already
// have are withdrawn or sent. A GoBGP prefix set holds one address
// family, so IPv4 and IPv6 CIDRs get a set and a statement each.
func (s *Speaker) applyNoExport(ctx context.Context, want []netip.Prefix) error {
	if slices.Equal(want, s.noExport) {
		return nil
	}
	if s.noExport != nil {
		_ = s.srv().DeletePolicyAssignment(ctx, &api.DeletePolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: exportDir, Policies: []*api.Policy{{Name: noExportPolicy}}}})
		_ = s.srv().DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: noExportPolicy}, All: true})
		for _, name := range noExportSets {
			_ = s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{
				DefinedSet: &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: name}, All: true})
		}
		s.noExport = nil
	}
	if len(want) > 0 {
		pol := &api.Policy{Name: noExportPolicy}
		for fam, name := range noExportSets {
			set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: name}
			for _, p := range want {
				if p.Addr().Is6() == (fam == 1) {
					set.Prefixes = append(set.Prefixes, &api.Prefix{IpPrefix: p.String(), MaskLengthMin: uint32(p.Bits()), MaskLengthMax: uint32(p.Addr().BitLen())})
				}
			}
			if len(set.Prefixes) == 0 {
				continue
			}
			if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set, Replace: true}); err != nil {
				return fmt.Errorf("bgp: no-export prefix set %s: %w", name, err)
			}
			pol.Statements = append(pol.Statements, &api.Statement{Name: name,
				Conditions: &api.Conditions{PrefixSet: &api.MatchSet{Name: name, Type: api.MatchSet_TYPE_ANY}},
				Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT}})
		}
		if err := s.srv().AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
			return fmt.Errorf("bgp: no-export policy: %w", err)
		}
		if err := s.srv().AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: exportDir, Policies: []*api.Policy{{Name: noExportPolicy}}, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
		}}); err != nil {
			return fmt.Errorf("bgp: no-export policy assignment: %w", err)
		}
		s.noExport = want
		s.ownPolicyAdded = true
	}
	for _, a := range sortedAddrs(s.applied) {
		_ = s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_OUT})
	}
	return nil
}

// noExportSets are the prefix sets of the no-export policy: IPv4, IPv6.
var noExportSets = [2]string{noExportPolicy + "-v4", noExportPolicy + "-v6"}
