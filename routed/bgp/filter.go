package bgp

import (
	"context"
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

// resetFilterSessions soft-resets the established sessions among
// addrs, so that their routes are judged again by their filters (a
// reset that fails is retried, softReset).
func (s *Speaker) resetFilterSessions(ctx context.Context, addrs map[netip.Addr]bool) {
	for _, a := range slices.SortedFunc(maps.Keys(addrs), netip.Addr.Compare) {
		if _, ok := s.applied[a]; ok {
			s.softReset(ctx, a, api.ResetPeerRequest_DIRECTION_BOTH)
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
		if h := s.assignedHook.Load(); h != nil {
			(*h)()
		}
		moved = true
	}
	return moved, nil
}

// assignOwnPolicy puts one of routed's own policies in the global list
// of dir before the BGPFilter policies, the list replaced in one step
// (swapPolicy): GoBGP's AddPolicyAssignment appends, behind them, where
// a filter's Accept would judge a route before routed's Reject until
// the filters were moved.
func (s *Speaker) assignOwnPolicy(ctx context.Context, dir api.PolicyDirection, name string) error {
	if f := s.failAssign.Load(); f != nil {
		if err := (*f)(name); err != nil {
			return fmt.Errorf("bgp: put policy %q before the filters: %w", name, err)
		}
	}
	_, err := s.swapPolicy(ctx, dir, "", name)
	return err
}
