package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	api "github.com/osrg/gobgp/v4/api"
)

// FilterRule is one BGPFilter rule: routes that match every condition
// set are accepted (after Operations) or rejected.
type FilterRule struct {
	Accept bool
	// Op (api's Equal, NotEqual, In or NotIn) compares the route's
	// prefix with CIDR; no CIDR matches every route. MinLen and MaxLen,
	// when MaxLen is set, are the prefix lengths the match takes
	// (Calico's prefixLength): the rule then matches the range for
	// Equal and In, and its complement for NotEqual and NotIn.
	Op             string
	CIDR           netip.Prefix
	MinLen, MaxLen uint8
	// RemoteOnly matches only routes learned from a peer, not those this
	// node originates (Calico's source: RemotePeers).
	RemoteOnly bool
	// Community matches routes carrying this standard ("AS:value") or
	// large ("AS:data1:data2") community.
	Community string
	// ASPathPrefix matches routes whose AS path starts with these ASNs.
	ASPathPrefix []uint32
	// Interface, a glob, matches routes whose next hop is in a subnet of
	// an interface of this host whose name matches (BIRD's ifname of a
	// BGP route: the interface towards its next hop). No such interface:
	// the rule matches nothing.
	Interface string
	// Priority, when set, matches routes of that route priority: a
	// LOCAL_PREF of api.LocalPrefForPriority(Priority), compared exactly
	// as Calico's BIRD does (routes from eBGP peers count as LOCAL_PREF
	// 100, the routes this node originates have the default priority).
	Priority uint32
	// AddCommunities are added to accepted routes, and Prepend put in
	// front of their AS path (Prepend[0] first). SetPriority, when set,
	// gives them that route priority (their LOCAL_PREF).
	AddCommunities []string
	Prepend        []uint32
	SetPriority    uint32
	// EBGPLocalAS is set on export rules of an eBGP session to the AS
	// this node presents there. GoBGP runs export policy after it has
	// put that AS in front of the path, where BIRD (Calico) runs it
	// before: AS path prefixes are matched behind it, and a prepend of
	// other ASNs goes in front of it with it repeated first, so the
	// peer still sees its neighbor's AS first (see ruleStatements).
	EBGPLocalAS uint32
}

// PeerFilters are the rules of one session's BGPFilters, in order: the
// first matching rule decides, unmatched routes are accepted.
type PeerFilters struct {
	Import, Export []FilterRule
}

// SetFilters sets the BGPFilter rules of each session, by peer address.
func (s *Speaker) SetFilters(f map[netip.Addr]PeerFilters) {
	c := make(map[netip.Addr]PeerFilters, len(f))
	for a, pf := range f {
		c[a] = PeerFilters{Import: slices.Clone(pf.Import), Export: slices.Clone(pf.Export)}
	}
	s.want.update(func() { s.want.filters = c })
}

const filterPolicyPrefix = "routed-filter-"

// peerFilterKey describes one session's filters for change detection:
// its rules and the subnets of the interfaces they name.
func peerFilterKey(pf PeerFilters, subnets map[string][]string) string {
	var ifaces []string
	for _, r := range append(slices.Clone(pf.Import), pf.Export...) {
		if r.Interface != "" {
			ifaces = append(ifaces, r.Interface+"="+fmt.Sprint(subnets[r.Interface]))
		}
	}
	slices.Sort(ifaces)
	return fmt.Sprintf("%v %v %v", pf.Import, pf.Export, slices.Compact(ifaces))
}

// installedFilters is what applyFilters installed for one session: its
// filters' key and its GoBGP policies and defined sets.
type installedFilters struct {
	key      string
	policies []string
	sets     []*api.DefinedSet
}

// applyFilters installs one global policy per session and direction with
// a statement per rule, limited to that session by a neighbor set. GoBGP
// stops at the first statement that accepts or rejects, which is
// BGPFilter's first-match rule. A session's policies are replaced only
// when its rules, or the subnets of the interfaces they name, change:
// the other sessions are never without theirs (one coming up meanwhile
// got its first routes unfiltered, and a soft reset sent before GoBGP
// marks it established does nothing). When routed's own policies were
// added after them (reorder), the filters are moved behind them in one
// step (moveFiltersLast). The sessions whose filters changed or moved
// are soft-reset so routes already exchanged are judged again.
func (s *Speaker) applyFilters(ctx context.Context, want map[netip.Addr]PeerFilters, reorder bool) error {
	subnets := interfaceSubnets(want)
	if s.filters == nil {
		s.filters = map[netip.Addr]*installedFilters{}
	}
	changed, reset := map[netip.Addr]bool{}, map[netip.Addr]bool{}
	if reorder {
		moved, err := s.moveFiltersLast(ctx)
		if moved {
			for a := range s.filters {
				reset[a] = true
			}
		}
		if err != nil {
			s.ownPolicyAdded = true // moved again at the next reconcile
			s.resetFilterSessions(ctx, reset)
			return err
		}
	}
	for a, inst := range s.filters {
		pf, ok := want[a]
		if ok && inst.key == peerFilterKey(pf, subnets) {
			continue
		}
		s.removeFilters(ctx, inst)
		delete(s.filters, a)
		changed[a] = true
	}
	addrs := make([]netip.Addr, 0, len(want))
	for a := range want {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var errs []error
	for _, a := range addrs {
		if _, ok := s.filters[a]; ok {
			continue // unchanged
		}
		inst := &installedFilters{key: peerFilterKey(want[a], subnets)}
		s.filters[a] = inst
		changed[a] = true
		for _, d := range []struct {
			name  string
			dir   api.PolicyDirection
			rules []FilterRule
		}{{"import", api.PolicyDirection_POLICY_DIRECTION_IMPORT, want[a].Import}, {"export", api.PolicyDirection_POLICY_DIRECTION_EXPORT, want[a].Export}} {
			if len(d.rules) == 0 {
				continue
			}
			name := fmt.Sprintf("%s%s-%s", filterPolicyPrefix, d.name, a)
			if err := s.addFilterPolicy(ctx, inst, name, a, d.dir, d.rules, subnets); err != nil {
				// Installed again (and only then reset: judged again
				// now, its routes would pass unfiltered) at the next
				// reconcile.
				inst.key = ""
				delete(changed, a)
				errs = append(errs, err)
				break
			}
		}
	}
	for _, a := range slices.SortedFunc(maps.Keys(changed), netip.Addr.Compare) {
		pf := want[a]
		s.log.WithFields(map[string]any{"peer": a.String(), "importRules": len(pf.Import), "exportRules": len(pf.Export)}).Info("BGPFilter rules of the session applied")
		reset[a] = true
	}
	for a, inst := range s.filters {
		if inst.key == "" {
			delete(reset, a)
		}
	}
	s.resetFilterSessions(ctx, reset)
	return errors.Join(errs...)
}

// resetFilterSessions soft-resets the established sessions among
// addrs, so that their routes are judged again by their filters.
func (s *Speaker) resetFilterSessions(ctx context.Context, addrs map[netip.Addr]bool) {
	for _, a := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
		if _, ok := s.applied[a]; ok {
			_ = s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_BOTH})
		}
	}
}

// moveFiltersLast puts the filters' policies behind routed's own in
// GoBGP's global import and export lists, each list replaced in one
// step (the filters stay in force throughout), and reports whether
// either changed.
func (s *Speaker) moveFiltersLast(ctx context.Context) (bool, error) {
	moved := false
	for _, dir := range []api.PolicyDirection{api.PolicyDirection_POLICY_DIRECTION_IMPORT, api.PolicyDirection_POLICY_DIRECTION_EXPORT} {
		var cur *api.PolicyAssignment
		err := s.srv().ListPolicyAssignment(ctx, &api.ListPolicyAssignmentRequest{Name: "global", Direction: dir}, func(a *api.PolicyAssignment) { cur = a })
		if err != nil {
			return moved, fmt.Errorf("bgp: list the global policies: %w", err)
		}
		if cur == nil {
			continue
		}
		var own, filters []*api.Policy
		for _, p := range cur.Policies {
			if strings.HasPrefix(p.Name, filterPolicyPrefix) {
				filters = append(filters, &api.Policy{Name: p.Name})
			} else {
				own = append(own, &api.Policy{Name: p.Name})
			}
		}
		ordered := append(own, filters...)
		same := true
		for i, p := range ordered {
			same = same && p.Name == cur.Policies[i].Name
		}
		if same {
			continue
		}
		err = s.srv().SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: dir, Policies: ordered, DefaultAction: cur.DefaultAction}})
		if err != nil {
			return moved, fmt.Errorf("bgp: put the filters behind routed's own policies: %w", err)
		}
		moved = true
	}
	return moved, nil
}

// removeFilters deletes what applyFilters installed for one session.
func (s *Speaker) removeFilters(ctx context.Context, inst *installedFilters) {
	for _, name := range inst.policies {
		for _, dir := range []api.PolicyDirection{api.PolicyDirection_POLICY_DIRECTION_IMPORT, api.PolicyDirection_POLICY_DIRECTION_EXPORT} {
			_ = s.srv().DeletePolicyAssignment(ctx, &api.DeletePolicyAssignmentRequest{
				Assignment: &api.PolicyAssignment{Name: "global", Direction: dir, Policies: []*api.Policy{{Name: name}}}})
		}
		_ = s.srv().DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: name}, All: true})
	}
	for _, set := range inst.sets {
		_ = s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: set, All: true})
	}
}

func (s *Speaker) addFilterPolicy(ctx context.Context, inst *installedFilters, name string, peer netip.Addr, dir api.PolicyDirection, rules []FilterRule, subnets map[string][]string) error {
	nset := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: []string{hostPrefix(peer)}}
	if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: nset, Replace: true}); err != nil {
		return fmt.Errorf("bgp: filter %s: %w", name, err)
	}
	inst.sets = append(inst.sets, nset)
	var stmts []*api.Statement
	for i, r := range rules {
		base := fmt.Sprintf("%s-%d", name, i)
		if r.Interface != "" && len(subnets[r.Interface]) == 0 {
			continue // no interface matches: the rule matches no route
		}
		rs, sets := ruleStatements(base, name, r, subnets[r.Interface])
		for _, set := range sets {
			if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set, Replace: true}); err != nil {
				return fmt.Errorf("bgp: filter %s: %w", base, err)
			}
			inst.sets = append(inst.sets, set)
		}
		stmts = append(stmts, rs...)
	}
	if err := s.srv().AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: name, Statements: stmts}}); err != nil {
		return fmt.Errorf("bgp: filter %s: %w", name, err)
	}
	inst.policies = append(inst.policies, name)
	err := s.srv().AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: dir, Policies: []*api.Policy{{Name: name}}, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
	}})
	if err != nil {
		return fmt.Errorf("bgp: filter %s assignment: %w", name, err)
	}
	return nil
}
