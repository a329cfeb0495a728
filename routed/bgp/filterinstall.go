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

// installedFilters is what applyFilters installed for one session: its
// filters' key, its GoBGP policy in each direction (assigned in the
// global list of that direction) and its defined sets. Names carry a
// generation, so that a session's next filters are installed beside
// its current ones and take their place in one step.
type installedFilters struct {
	key    string
	policy map[api.PolicyDirection]string
	sets   []*api.DefinedSet
	// stale are policies of a swap that was half done and could not be
	// undone, no longer assigned: deleted with the rest (key is "" then,
	// so the record is replaced at the next reconcile).
	stale []string
}

// filterDirs are the directions a session's filters have policies in.
var filterDirs = []api.PolicyDirection{api.PolicyDirection_POLICY_DIRECTION_IMPORT, api.PolicyDirection_POLICY_DIRECTION_EXPORT}

// applyFilters installs one global policy per session and direction with
// a statement per rule, limited to that session by a neighbor set. GoBGP
// stops at the first statement that accepts or rejects, which is
// BGPFilter's first-match rule. A session's policies are replaced only
// when its rules, or the subnets of the interfaces they name, change,
// and then make-before-break: the new ones are added beside the old,
// take their place in the global lists in one step, and only then are
// the old ones deleted, so no session is ever without its filters (one
// coming up meanwhile got its first routes unfiltered, and a soft reset
// sent before GoBGP marks it established does nothing). New filters
// that fail to install leave the session's last installed ones in
// force, as BIRD keeps its last good configuration; the error is
// returned and the install tried again at the next reconcile. (apply
// moves the filters behind routed's own policies as soon as one of
// those is added: reorderFilters.) The sessions whose filters changed
// are soft-reset so routes already exchanged are judged again. The filters of sessions no longer
// in want are left to dropFilters, after the sessions are applied.
func (s *Speaker) applyFilters(ctx context.Context, want map[netip.Addr]PeerFilters, subnets map[string][]string) error {
	if s.filters == nil {
		s.filters = map[netip.Addr]*installedFilters{}
	}
	reset := map[netip.Addr]bool{}
	var errs []error
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		key := peerFilterKey(want[a], subnets)
		old := s.filters[a]
		if old != nil && old.key == key {
			continue // unchanged
		}
		next, err := s.installFilters(ctx, a, want[a], subnets)
		if err != nil {
			s.deleteFilterObjects(ctx, next)
			errs = append(errs, err)
			continue
		}
		if done, err := s.swapFilters(ctx, old, next); err != nil {
			errs = append(errs, err)
			// next's policies were in force in some direction for a
			// while: what they let in or out is judged again by what
			// is in force now.
			if len(done) > 0 {
				reset[a] = true
			}
			if undone, uerr := s.swapFilters(ctx, part(next, done), part(old, done)); uerr != nil || len(undone) != len(done) {
				// GoBGP names next's policies where the swap was done
				// (and not undone) and old's elsewhere: keep what it
				// names, to be replaced whole at the next reconcile.
				errs = append(errs, uerr)
				still := slices.DeleteFunc(slices.Clone(done), func(d api.PolicyDirection) bool { return slices.Contains(undone, d) })
				s.filters[a] = merged(old, next, still)
				continue
			}
			s.deleteFilterObjects(ctx, next)
			continue
		}
		next.key = key
		s.deleteFilterObjects(ctx, old)
		s.filters[a] = next
		pf := want[a]
		s.log.WithFields(map[string]any{"peer": a.String(), "importRules": len(pf.Import), "exportRules": len(pf.Export)}).Info("BGPFilter rules of the session applied")
		reset[a] = true
	}
	s.resetFilterSessions(ctx, reset)
	return errors.Join(errs...)
}

// reorderFilters moves the filters behind routed's own policies, after
// one of those was added (behind them), and soft-resets every filtered
// session if that changed a list. A failure is tried again at the next
// reconcile.
func (s *Speaker) reorderFilters(ctx context.Context) error {
	moved, err := s.moveFiltersLast(ctx)
	if moved {
		all := map[netip.Addr]bool{}
		for a := range s.filters {
			all[a] = true
		}
		s.resetFilterSessions(ctx, all)
	}
	if err != nil {
		s.ownPolicyAdded = true // moved again at the next reconcile
	}
	return err
}

// dropFilters removes the filters of the sessions want no longer names.
// It runs once the sessions are applied, so that a session being
// removed keeps its filters until it is gone.
func (s *Speaker) dropFilters(ctx context.Context, want map[netip.Addr]PeerFilters) error {
	var errs []error
	for _, a := range slices.SortedFunc(maps.Keys(s.filters), netip.Addr.Compare) {
		if _, ok := want[a]; ok {
			continue
		}
		inst := s.filters[a]
		if done, err := s.swapFilters(ctx, inst, nil); err != nil {
			// What was taken out of a list stays out; taken out
			// again (a no-op) at the next reconcile.
			errs = append(errs, err)
			s.filters[a] = merged(inst, nil, done)
			continue
		}
		s.deleteFilterObjects(ctx, inst)
		delete(s.filters, a)
		s.log.WithField("peer", a.String()).Info("BGPFilter rules of the session removed")
		s.resetFilterSessions(ctx, map[netip.Addr]bool{a: true})
	}
	return errors.Join(errs...)
}

// unfiltered reports whether a session to peer a would start without
// the filters want gives it: they did not install (or name interfaces
// whose subnets could not be read: ifacesUnknown), and the session is
// not up yet. Such a session is not started (fail closed); one already
// up keeps its last installed filters.
func (s *Speaker) unfiltered(a netip.Addr, want map[netip.Addr]PeerFilters, subnets map[string][]string, ifacesUnknown bool) bool {
	pf, ok := want[a]
	if !ok || len(pf.Import)+len(pf.Export) == 0 {
		return false
	}
	if _, up := s.applied[a]; up {
		return false
	}
	if ifacesUnknown && slices.ContainsFunc(append(slices.Clone(pf.Import), pf.Export...), func(r FilterRule) bool { return r.Interface != "" }) {
		return true // its rules' subnets cannot be told now
	}
	inst := s.filters[a]
	return inst == nil || inst.key != peerFilterKey(pf, subnets)
}

// installFilters adds a session's policies and defined sets under new
// names, not yet assigned. On error it returns what it added, for
// deleteFilterObjects.
func (s *Speaker) installFilters(ctx context.Context, peer netip.Addr, pf PeerFilters, subnets map[string][]string) (*installedFilters, error) {
	s.filterGen++
	inst := &installedFilters{policy: map[api.PolicyDirection]string{}}
	for _, d := range []struct {
		name  string
		dir   api.PolicyDirection
		rules []FilterRule
	}{{"import", api.PolicyDirection_POLICY_DIRECTION_IMPORT, pf.Import}, {"export", api.PolicyDirection_POLICY_DIRECTION_EXPORT, pf.Export}} {
		if len(d.rules) == 0 {
			continue
		}
		name := fmt.Sprintf("%s%s-%s-g%d", filterPolicyPrefix, d.name, peer, s.filterGen)
		if err := s.addFilterPolicy(ctx, inst, name, peer, d.rules, subnets); err != nil {
			return inst, err
		}
		inst.policy[d.dir] = name
	}
	return inst, nil
}

// swapFilters puts next's policies in the global lists in place of
// old's (either may be nil), each list replaced in one step; a policy
// new to a list goes at its end, behind routed's own. It returns the
// directions it changed, also when it fails part way.
func (s *Speaker) swapFilters(ctx context.Context, old, next *installedFilters) ([]api.PolicyDirection, error) {
	var done []api.PolicyDirection
	for _, dir := range filterDirs {
		from, to := old.policyIn(dir), next.policyIn(dir)
		if from == to {
			continue
		}
		changed, err := s.swapPolicy(ctx, dir, from, to)
		if err != nil {
			return done, err
		}
		if changed {
			done = append(done, dir)
		}
	}
	return done, nil
}

// swapPolicy replaces from by to in the global list of dir ("" for
// either: add to its end, or remove), and reports whether the list
// changed.
func (s *Speaker) swapPolicy(ctx context.Context, dir api.PolicyDirection, from, to string) (bool, error) {
	if f := s.failSwap.Load(); f != nil {
		if err := (*f)(dir); err != nil {
			return false, fmt.Errorf("bgp: put policy %q in place of %q: %w", to, from, err)
		}
	}
	var cur *api.PolicyAssignment
	err := s.srv().ListPolicyAssignment(ctx, &api.ListPolicyAssignmentRequest{Name: "global", Direction: dir}, func(a *api.PolicyAssignment) { cur = a })
	if err != nil {
		return false, fmt.Errorf("bgp: list the global policies: %w", err)
	}
	var names []*api.Policy
	placed, changed := false, false
	if cur != nil {
		for _, p := range cur.Policies {
			switch {
			case from == "" || p.Name != from:
				names = append(names, &api.Policy{Name: p.Name})
			case to != "":
				names = append(names, &api.Policy{Name: to})
				placed, changed = true, true
			default:
				changed = true
			}
		}
	}
	if !placed && to != "" {
		// A filter goes at the end; one of routed's own before the
		// first filter.
		at := len(names)
		if !strings.HasPrefix(to, filterPolicyPrefix) {
			if i := slices.IndexFunc(names, func(p *api.Policy) bool { return strings.HasPrefix(p.Name, filterPolicyPrefix) }); i >= 0 {
				at = i
			}
		}
		names = slices.Insert(names, at, &api.Policy{Name: to})
		changed = true
	}
	switch {
	case !changed:
		return false, nil
	case cur == nil:
		err = s.srv().AddPolicyAssignment(ctx, &api.AddPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: dir, Policies: names, DefaultAction: api.RouteAction_ROUTE_ACTION_ACCEPT}})
	case len(names) == 0:
		err = s.srv().DeletePolicyAssignment(ctx, &api.DeletePolicyAssignmentRequest{
			Assignment: &api.PolicyAssignment{Name: "global", Direction: dir, Policies: []*api.Policy{{Name: from}}}})
	default:
		err = s.srv().SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
			Name: "global", Direction: dir, Policies: names, DefaultAction: cur.DefaultAction}})
	}
	if err != nil {
		return false, fmt.Errorf("bgp: put policy %q in place of %q: %w", to, from, err)
	}
	if h := s.assignedHook.Load(); h != nil {
		(*h)()
	}
	return true, nil
}

// policyIn is inst's policy in dir ("" for none, or a nil inst).
func (inst *installedFilters) policyIn(dir api.PolicyDirection) string {
	if inst == nil {
		return ""
	}
	return inst.policy[dir]
}

// part is inst limited to the directions dirs (nil for a nil inst).
func part(inst *installedFilters, dirs []api.PolicyDirection) *installedFilters {
	if inst == nil {
		return nil
	}
	p := &installedFilters{policy: map[api.PolicyDirection]string{}}
	for _, d := range dirs {
		if n := inst.policy[d]; n != "" {
			p.policy[d] = n
		}
	}
	return p
}

// merged is what GoBGP holds after a swap from old to next was done
// for the directions done only: next's policies there, old's
// elsewhere, the others stale, every set kept; its key is "" so that
// it is replaced whole at the next reconcile.
func merged(old, next *installedFilters, done []api.PolicyDirection) *installedFilters {
	m := &installedFilters{policy: map[api.PolicyDirection]string{}}
	for _, dir := range filterDirs {
		cur, other := old.policyIn(dir), next.policyIn(dir)
		if slices.Contains(done, dir) {
			cur, other = other, cur
		}
		if cur != "" {
			m.policy[dir] = cur
		}
		if other != "" {
			m.stale = append(m.stale, other)
		}
	}
	for _, inst := range []*installedFilters{old, next} {
		if inst != nil {
			m.sets = append(m.sets, inst.sets...)
			m.stale = append(m.stale, inst.stale...)
		}
	}
	return m
}

// deleteFilterObjects deletes a session's policies and defined sets
// (nil: nothing), once no global list names them.
func (s *Speaker) deleteFilterObjects(ctx context.Context, inst *installedFilters) {
	if inst == nil {
		return
	}
	for _, name := range append(slices.Collect(maps.Values(inst.policy)), inst.stale...) {
		_ = s.srv().DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: name}, All: true})
	}
	for _, set := range inst.sets {
		_ = s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: set, All: true})
	}
}

// addFilterPolicy adds the policy name of one session and direction,
// unassigned, and its defined sets (recorded in inst as they are added).
func (s *Speaker) addFilterPolicy(ctx context.Context, inst *installedFilters, name string, peer netip.Addr, rules []FilterRule, subnets map[string][]string) error {
	if f := s.failFilter.Load(); f != nil {
		if err := (*f)(peer); err != nil {
			return fmt.Errorf("bgp: filter %s: %w", name, err)
		}
	}
	nset := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: []string{hostPrefix(peer)}}
	if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: nset}); err != nil {
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
			if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set}); err != nil {
				return fmt.Errorf("bgp: filter %s: %w", base, err)
			}
			inst.sets = append(inst.sets, set)
		}
		stmts = append(stmts, rs...)
	}
	if err := s.srv().AddPolicy(ctx, &api.AddPolicyRequest{Policy: &api.Policy{Name: name, Statements: stmts}}); err != nil {
		return fmt.Errorf("bgp: filter %s: %w", name, err)
	}
	return nil
}
