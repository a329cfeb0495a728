package bgp

import (
	"context"
	"fmt"
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

// filterKey describes filters for change detection.
func filterKey(f map[netip.Addr]PeerFilters) string {
	addrs := make([]netip.Addr, 0, len(f))
	for a := range f {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	var b strings.Builder
	for _, a := range addrs {
		fmt.Fprintf(&b, "%s %v %v;", a, f[a].Import, f[a].Export)
	}
	return b.String()
}

// applyFilters installs one global policy per session and direction with
// a statement per rule, limited to that session by a neighbor set. GoBGP
// stops at the first statement that accepts or rejects, which is
// BGPFilter's first-match rule. The policies are re-installed when they
// change, or when routed's own policies were added after them (they
// must come after routed's own), and the sessions are soft-reset so routes already
// exchanged are judged again.
func (s *Speaker) applyFilters(ctx context.Context, want map[netip.Addr]PeerFilters, reorder bool) error {
	subnets := interfaceSubnets(want)
	key := filterKey(want) + fmt.Sprint(subnets)
	if key == s.filterKey && !reorder {
		return nil
	}
	for _, name := range s.filterPolicies {
		for _, dir := range []api.PolicyDirection{api.PolicyDirection_POLICY_DIRECTION_IMPORT, api.PolicyDirection_POLICY_DIRECTION_EXPORT} {
			_ = s.srv().DeletePolicyAssignment(ctx, &api.DeletePolicyAssignmentRequest{
				Assignment: &api.PolicyAssignment{Name: "global", Direction: dir, Policies: []*api.Policy{{Name: name}}}})
		}
		_ = s.srv().DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: name}, All: true})
	}
	for _, set := range s.filterSets {
		_ = s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: set, All: true})
	}
	s.filterPolicies, s.filterSets = nil, nil
	addrs := make([]netip.Addr, 0, len(want))
	for a := range want {
		addrs = append(addrs, a)
	}
	slices.SortFunc(addrs, netip.Addr.Compare)
	for _, a := range addrs {
		for _, d := range []struct {
			name  string
			dir   api.PolicyDirection
			rules []FilterRule
		}{{"import", api.PolicyDirection_POLICY_DIRECTION_IMPORT, want[a].Import}, {"export", api.PolicyDirection_POLICY_DIRECTION_EXPORT, want[a].Export}} {
			if len(d.rules) == 0 {
				continue
			}
			name := fmt.Sprintf("%s%s-%s", filterPolicyPrefix, d.name, a)
			if err := s.addFilterPolicy(ctx, name, a, d.dir, d.rules, subnets); err != nil {
				return err
			}
		}
	}
	s.filterKey = key
	for a := range want {
		if _, ok := s.applied[a]; ok {
			_ = s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_BOTH})
		}
	}
	return nil
}

func (s *Speaker) addFilterPolicy(ctx context.Context, name string, peer netip.Addr, dir api.PolicyDirection, rules []FilterRule, subnets map[string][]string) error {
	nset := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: []string{hostPrefix(peer)}}
	if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: nset, Replace: true}); err != nil {
		return fmt.Errorf("bgp: filter %s: %w", name, err)
	}
	s.filterSets = append(s.filterSets, nset)
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
			s.filterSets = append(s.filterSets, set)
		}
		stmts = append(stmts, rs...)
	}
	if err := s.srv().AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: name, Statements: stmts}}); err != nil {
		return fmt.Errorf("bgp: filter %s: %w", name, err)
	}
	s.filterPolicies = append(s.filterPolicies, name)
	err := s.srv().AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: dir, Policies: []*api.Policy{{Name: name}}, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT,
	}})
	if err != nil {
		return fmt.Errorf("bgp: filter %s assignment: %w", name, err)
	}
	return nil
}
