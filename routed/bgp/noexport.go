package bgp

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	api "github.com/osrg/gobgp/v4/api"
)

// noExportPolicy starts the names of the export policy (and its prefix
// sets) that keeps the routes of pools with disableBGPExport from every
// peer: noExportPolicy-g<generation>, a new one at each change.
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
// statements hold the set they were made with, so a change makes a new
// policy and sets (under a new generation's names), puts the policy in
// the old one's place in the export list in one step (or before the
// BGPFilter policies, the first time), and only then deletes the old:
// there is never a moment without the Reject. A failure leaves the old
// policy in force. The peers are then soft-reset so routes they already
// have are withdrawn or sent (a reset that fails is retried, softReset). A GoBGP prefix set holds one address
// family, so IPv4 and IPv6 CIDRs get a set and a statement each.
func (s *Speaker) applyNoExport(ctx context.Context, want []netip.Prefix) error {
	if slices.Equal(want, s.noExport) {
		return nil
	}
	old, next := s.noExportName, ""
	var sets []string
	if len(want) > 0 {
		s.filterGen++
		next = fmt.Sprintf("%s-g%d", noExportPolicy, s.filterGen)
		pol := &api.Policy{Name: next}
		for fam, suffix := range []string{"-v4", "-v6"} {
			set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: next + suffix}
			for _, p := range want {
				if p.Addr().Is6() == (fam == 1) {
					set.Prefixes = append(set.Prefixes, &api.Prefix{IpPrefix: p.String(), MaskLengthMin: uint32(p.Bits()), MaskLengthMax: uint32(p.Addr().BitLen())})
				}
			}
			if len(set.Prefixes) == 0 {
				continue
			}
			if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set}); err != nil {
				s.deleteNoExport(ctx, "", sets)
				return fmt.Errorf("bgp: no-export prefix set %s: %w", set.Name, err)
			}
			sets = append(sets, set.Name)
			pol.Statements = append(pol.Statements, &api.Statement{Name: set.Name,
				Conditions: &api.Conditions{PrefixSet: &api.MatchSet{Name: set.Name, Type: api.MatchSet_TYPE_ANY}},
				Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_REJECT}})
		}
		if err := s.srv().AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
			s.deleteNoExport(ctx, "", sets)
			return fmt.Errorf("bgp: no-export policy: %w", err)
		}
	}
	var err error
	if old == "" {
		err = s.assignOwnPolicy(ctx, exportDir, next)
	} else {
		_, err = s.swapPolicy(ctx, exportDir, old, next)
	}
	if err != nil {
		s.deleteNoExport(ctx, next, sets)
		return fmt.Errorf("bgp: no-export policy: %w", err)
	}
	if old != "" {
		s.deleteNoExport(ctx, old, []string{old + "-v4", old + "-v6"})
	}
	s.noExport, s.noExportName = want, next
	if next != "" {
		s.ownPolicyAdded = true // the filters are checked to be behind it
	}
	for _, a := range sortedAddrs(s.applied) {
		s.softReset(ctx, a, api.ResetPeerRequest_DIRECTION_OUT)
	}
	return nil
}

// deleteNoExport deletes a no-export policy ("": none) and its sets,
// once no list names it.
func (s *Speaker) deleteNoExport(ctx context.Context, policy string, sets []string) {
	if policy != "" {
		_ = s.srv().DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: policy}, All: true})
	}
	for _, name := range sets {
		_ = s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{
			DefinedSet: &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_PREFIX, Name: name}, All: true})
	}
}
