package policy

import (
	"fmt"
	"slices"
	"unique"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// SetEndpoint adds or replaces an endpoint: its addresses join the sets
// that select it and, when local, its chains and dispatch entry follow.
// The calculator keeps none of ep's maps, slices or strings but its key.
func (c *Calc) SetEndpoint(ep Endpoint) {
	old := c.endpoint(ep.Key)
	g := c.groupOf(&ep)
	l := c.locals[ep.Key]
	if old != nil && old.g == g && old.sameIPs(ep.IPs) && old.nodeName() == ep.Node &&
		(l != nil) == ep.Local && (l == nil || (l.iface == ep.Iface && l.pod == ep.Pod)) {
		return // as it was (a snapshot repeats what has not changed)
	}
	e := c.makeEndpoint(ep.Key, g, old)
	e.setIPs(ep.IPs)
	if ep.Node != "" {
		e.node = unique.Make(ep.Node)
	}
	c.storeEndpoint(e)
	if c.at != nil {
		if old != nil {
			c.at.removeEndpoint(old)
		}
		c.at.addEndpoint(e)
	}
	c.addTo(e)
	now := c.setsFor(g)
	if old == nil {
		for _, s := range now {
			c.changeMembers(s, nil, s.membersOf(e))
		}
	} else {
		// What old contributed: the sets that select its group now (a
		// set's selector never changes, every set was filled from every
		// endpoint when it was made, and a group's labels change only
		// with its members' contributions, see rederive).
		was := c.setsFor(old.g)
		for _, s := range now {
			var before []nftdp.Member
			if slices.Contains(was, s) {
				before = s.membersOf(old)
			}
			c.changeMembers(s, before, s.membersOf(e))
		}
		for _, s := range was {
			if !slices.Contains(now, s) {
				c.changeMembers(s, s.membersOf(old), nil)
			}
		}
		c.removeFrom(old)
	}
	if l != nil && (!ep.Local || l.iface != ep.Iface) {
		c.removeLocal(l)
	}
	if ep.Local {
		c.updateLocal(e, ep.Iface, ep.Pod)
	}
	if old != nil {
		c.releaseEndpoint(old, e)
	}
}

// DeleteEndpoint removes an endpoint; a missing one is no change.
func (c *Calc) DeleteEndpoint(key string) {
	old := c.endpoint(key)
	if old == nil {
		return
	}
	c.dropEndpoint(key)
	if c.at != nil {
		c.at.removeEndpoint(old)
	}
	for _, s := range c.setsFor(old.g) {
		c.changeMembers(s, s.membersOf(old), nil)
	}
	if l := c.locals[key]; l != nil {
		c.removeLocal(l)
	}
	c.removeFrom(old)
	c.releaseEndpoint(old, nil)
}

// rederive recomputes a scope's labels after a profile it reads
// changed: the endpoints of its groups whose labels changed leave the
// sets that no longer select them and join those that now do, and
// their local endpoints' chains follow.
func (c *Calc) rederive(s *groupScope) {
	// What the sets decided with the labels as they were.
	was := make([][]*aset, len(s.groups))
	for i, g := range s.groups {
		was[i] = c.setsFor(g)
	}
	labels := s.labels
	c.deriveScope(s)
	same := labels.equal(s.labels)
	for i, g := range s.groups {
		nsLabels, saLabels := g.nsLabels, g.saLabels
		c.derive(g)
		if same && g.nsLabels == nsLabels && g.saLabels == saLabels {
			continue // the same labels (they are interned): the same answers
		}
		c.regroup(g, was[i])
	}
}

// regroup moves a group whose labels changed from the sets that
// selected it (was) to those that select it now, and renders its local
// endpoints' chains again.
func (c *Calc) regroup(g *group, was []*aset) {
	g.setGen, g.pols = -1, nil
	now := c.setsFor(g)
	for _, e := range g.eps {
		for _, s := range now {
			if !slices.Contains(was, s) {
				c.changeMembers(s, nil, s.membersOf(e))
			}
		}
		for _, s := range was {
			if !slices.Contains(now, s) {
				c.changeMembers(s, s.membersOf(e), nil)
			}
		}
	}
	for _, e := range g.eps {
		if l := c.locals[e.key]; l != nil {
			c.updateLocal(e, l.iface, l.pod)
		}
		c.rehost(e.key)
	}
}

// profileNames are the profiles whose labels a scope's labels are
// derived from (see deriveScope): its own, its namespace's and its
// service account's.
func profileNames(s *groupScope) []string {
	return append(slices.Clip(s.profiles), api.NamespaceProfilePrefix+s.ns,
		api.ServiceAccountProfilePrefix+s.ns+"."+s.sa)
}

// holdProfiles records s as a user of the profiles its labels read.
func (c *Calc) holdProfiles(s *groupScope) {
	for _, name := range profileNames(s) {
		if users := c.profileUsers[name]; !slices.Contains(users, s) {
			c.profileUsers[name] = append(users, s)
		}
	}
}

// releaseProfiles undoes holdProfiles.
func (c *Calc) releaseProfiles(s *groupScope) {
	for _, name := range profileNames(s) {
		if users := slices.DeleteFunc(c.profileUsers[name], func(o *groupScope) bool { return o == s }); len(users) > 0 {
			c.profileUsers[name] = slices.Clip(users)
		} else {
			delete(c.profileUsers, name)
		}
	}
}

// SetNetworkSet adds or replaces a network set (namespaced when
// Namespace is set).
func (c *Calc) SetNetworkSet(s NetworkSet) {
	ns := newNetset(s, c.profiles[api.NamespaceProfilePrefix+s.Namespace])
	if c.at != nil {
		if old := c.netsets[s.Key]; old != nil {
			c.at.removeNetset(old)
		}
		c.at.addNetset(ns)
	}
	c.netsets[s.Key] = ns
	for _, as := range c.sets {
		c.contribute(as, s.Key, as.netsetMembers(ns))
	}
}

// DeleteNetworkSet removes a network set by key.
func (c *Calc) DeleteNetworkSet(key string) {
	old := c.netsets[key]
	if old == nil {
		return
	}
	if c.at != nil {
		c.at.removeNetset(old)
	}
	delete(c.netsets, key)
	for _, as := range c.sets {
		c.contribute(as, key, nil)
	}
}

// updateLocal recomputes which policies and profiles apply to a local
// endpoint and renders its chains.
func (c *Calc) updateLocal(e *endpoint, iface, pod string) {
	l := c.locals[e.key]
	var oldPols []*cpolicy
	var oldProfiles []string
	if l == nil {
		l = &local{iface: iface}
		c.locals[e.key] = l
	} else {
		oldPols = union(l.in, l.out)
		oldProfiles = l.ep.g.profiles
	}
	l.ep, l.pod = e, pod
	l.in, l.out = c.policiesFor(e.g)
	newPols := union(l.in, l.out)
	c.reselect(e.key, oldPols, newPols, oldProfiles, e.g.profiles)
	c.renderEndpoint(l)
}

// reselect moves a local endpoint's (or host endpoint's) selections
// from the old policies and profiles to the new ones: new references
// first, so that what both have is never deactivated in between.
func (c *Calc) reselect(key string, oldPols, newPols []*cpolicy, oldProfiles, newProfiles []string) {
	for _, p := range newPols {
		if !p.selected[key] {
			p.selected[key] = true
			if len(p.selected) == 1 {
				c.activate(p)
			}
		}
	}
	for _, p := range oldPols {
		if !slices.Contains(newPols, p) {
			c.unselect(p, key)
		}
	}
	for _, name := range newProfiles {
		c.refProfile(name)
	}
	for _, name := range oldProfiles {
		c.unrefProfile(name)
	}
}

func (c *Calc) unselect(p *cpolicy, key string) {
	if !p.selected[key] {
		return
	}
	delete(p.selected, key)
	if len(p.selected) == 0 && c.policies[p.key] == p {
		c.deactivate(p)
	}
}

func (c *Calc) removeLocal(l *local) {
	for _, p := range union(l.in, l.out) {
		c.unselect(p, l.ep.key)
	}
	for _, name := range l.ep.g.profiles {
		c.unrefProfile(name)
	}
	c.sink.DeleteEndpoint(l.iface)
	c.index.deleteIface(l.iface)
	for _, ch := range l.chains {
		c.unrefEPChain(ch)
	}
	delete(c.locals, l.ep.key)
	// Another local endpoint on the same interface (a pod's endpoint
	// under a new name, set before the old one went) gets the
	// interface's dispatch back, instead of its packets dropped as an
	// unknown interface's until it changes.
	for _, o := range c.locals {
		if o.iface == l.iface {
			c.renderEndpoint(o)
			break
		}
	}
}

func union(a, b []*cpolicy) []*cpolicy {
	out := append([]*cpolicy{}, a...)
	for _, p := range b {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// renderEndpoint writes a local endpoint's two chains (see
// endpointChain) and dispatches its interface to them in the tables of
// its address families (nftdp.Families). A chain is named
// by its content, so endpoints with the same policies and profiles share
// it, and a new pod like an existing one only adds its interface to the
// dispatch maps (no rule changes at all).
func (c *Calc) renderEndpoint(l *local) {
	e := l.ep
	var names [2]string
	for k, in := range []bool{false, true} {
		name, rules, infos, runs := c.endpointChain(e, l.in, l.out, in)
		names[k] = name
		c.swapEPChain(&l.chains[k], name, rules, infos, runs)
	}
	c.sink.SetEndpoint(l.iface, names[0], names[1], nftdp.FamiliesOf(e.ipList()))
	c.index.setIface(l.iface, EndpointRef{Key: e.key, Namespace: e.g.ns, Pod: l.pod})
}

// endpointChain computes an endpoint's chain for one direction, given
// the policies that apply to it in order: per tier, a jump to each
// policy (or to a guarded run of them, see calc_guard.go, listed in
// runs) while no Pass was seen, the tier's end (drop, unless its
// default action is Pass), then its profiles, then drop. The name is a
// hash of the rules without the drop logs, so turning drop logging on
// or off does not rename chains and a rule ID means the same with and
// without it.
func (c *Calc) endpointChain(e *endpoint, inPols, outPols []*cpolicy, in bool) (name string, out []nftdp.Rule, named map[string]RuleInfo, runs []guardRun) {
	pols := outPols
	if in {
		pols = inPols
	}
	return c.policyListChain(pols, in, chainShape{prefix: "ep-" + dirName(in)[:2] + "-",
		profiles: e.g.profiles, tierDrop: true, endDrop: true, family: e.onlyFamily()})
}

// chainShape is what differs between the chains policyListChain makes:
// a pod's (and a host endpoint's own) chain ends each tier and itself
// with a drop after its profiles; a host endpoint's forward chain has no
// profiles; its doNotTrack and preDNAT chains never drop but by a rule
// (what no rule decides goes on to normal policy, as in Calico).
type chainShape struct {
	prefix            string // the name's, before the content's hash
	profiles          []string
	tierDrop, endDrop bool
	family            uint8 // 4 or 6: every rule only in that family
}

// policyListChain renders the chain of a list of policies (see
// endpointChain) in the given shape.
func (c *Calc) policyListChain(pols []*cpolicy, in bool, sh chainShape) (name string, out []nftdp.Rule, named map[string]RuleInfo, runs []guardRun) {
	dir := dirName(in)
	var rules []nftdp.Rule
	infos := map[string]RuleInfo{}
	if len(pols) > 0 {
		rules = append(rules, nftdp.Rule{Action: nftdp.ActClearPass})
	}
	for i := 0; i < len(pols); {
		tier := pols[i].tier
		j := i
		for j < len(pols) && pols[j].tier == tier {
			j++
		}
		rules = append(rules, tierJumps(pols[i:j], in, &runs)...)
		if sh.tierDrop && !c.tier(tier).pass {
			id := "/tier-end/" + tier
			infos[id] = RuleInfo{Kind: KindTierEnd, Tier: tier, Direction: dir, Index: -1, Action: string(api.ActionDeny)}
			rules = append(rules, nftdp.Rule{ID: id, IfPassClear: true, Counter: true, Action: nftdp.ActDrop})
		}
		rules = append(rules, nftdp.Rule{Action: nftdp.ActClearPass})
		i = j
	}
	for _, name := range sh.profiles {
		if p := c.profiles[name]; p != nil {
			rules = append(rules, nftdp.Rule{Action: nftdp.ActJump, Target: p.chain(in)})
		}
	}
	// An endpoint with addresses of one family only has no business
	// with the other: it is not dispatched there at all (the other
	// table's base chains drop its traffic as an unknown interface),
	// and its rules are that family's, so that the chain reads the
	// same in Explain and the kernel.
	if v := sh.family; v != 0 {
		for i := range rules {
			rules[i].IPVersion = v
		}
	}
	if sh.endDrop {
		infos["/no-profile-allowed"] = RuleInfo{Kind: KindNoProfile, Direction: dir, Index: -1, Action: string(api.ActionDeny)}
		rules = append(rules, nftdp.Rule{ID: "/no-profile-allowed", Counter: true, Action: nftdp.ActDrop})
	}
	name = hashName(sh.prefix, fmt.Sprintf("%v", rules))
	out = make([]nftdp.Rule, 0, len(rules)+len(infos))
	named = make(map[string]RuleInfo, len(infos))
	for _, r := range rules {
		if r.ID != "" {
			ri := infos[r.ID]
			r.ID = name + r.ID
			ri.ID = r.ID
			named[r.ID] = ri
			if c.log.Drops {
				out = append(out, nftdp.Rule{IfPassClear: r.IfPassClear, IPVersion: r.IPVersion, Action: nftdp.ActLog,
					LogGroup: c.log.Group, LogRate: c.log.rate(), LogPrefix: logDropRulePrefix + ruleToken(r.ID)})
			}
			r = c.log.flowMark(r)
		}
		out = append(out, r)
	}
	return name, out, named, runs
}

// swapEPChain makes *have the endpoint chain name (rendered as rules,
// with its guarded runs): the chain is written when its first user
// comes, and the one *have held is released.
func (c *Calc) swapEPChain(have *string, name string, rules []nftdp.Rule, infos map[string]RuleInfo, runs []guardRun) {
	if *have == name {
		return
	}
	if c.epChainRefs[name]++; c.epChainRefs[name] == 1 {
		c.refRuns(runs)
		c.epChainRuns[name] = runs
		c.setChain(name, rules, infos)
	}
	c.unrefEPChain(*have)
	*have = name
}

func (c *Calc) unrefEPChain(name string) {
	if name == "" {
		return
	}
	if c.epChainRefs[name]--; c.epChainRefs[name] <= 0 {
		delete(c.epChainRefs, name)
		c.deleteChain(name)
		c.unrefRuns(c.epChainRuns[name])
		delete(c.epChainRuns, name)
	}
}

// refSets takes a reference on each set, creating and filling new ones
// from every endpoint and network set (the endpoints through the label
// index: the set's selector is asked once per label key).
func (c *Calc) refSets(specs []setSpec) {
	for _, sp := range specs {
		s := c.sets[sp.name]
		if s == nil {
			s = &aset{spec: sp, nets: map[string][]nftdp.Member{}}
			c.sets[sp.name] = s
			c.groups.setGen++
			c.sink.AddSet(sp.name, sp.kind)
			c.matching(sp.m, func(e *endpoint) {
				c.changeMembers(s, nil, s.membersOf(e))
			})
			for k, n := range c.netsets {
				c.contribute(s, k, s.netsetMembers(n))
			}
		}
		s.refs++
	}
}

func (c *Calc) unrefSets(specs []setSpec) {
	for _, sp := range specs {
		s := c.sets[sp.name]
		if s == nil {
			continue
		}
		if s.refs--; s.refs == 0 {
			delete(c.sets, sp.name)
			c.groups.setGen++
			c.sink.DeleteSet(sp.name)
		}
	}
}

// contribute replaces what one network set gives a set.
func (c *Calc) contribute(s *aset, key string, ms []nftdp.Member) {
	ms = distinctMembers(ms)
	c.changeMembers(s, s.nets[key], ms)
	if len(ms) == 0 {
		delete(s.nets, key)
	} else {
		s.nets[key] = ms
	}
}

// changeMembers replaces what one endpoint or network set gives a set
// (and the guard sets it feeds): before by now. Both must be distinct
// and masked (see distinctMembers): the sink counts references per
// member, and a repeat would leave one behind when the contribution
// shrinks (a network set may list a net twice, or as 10.9.0.7/24 and
// 10.9.0.0/24).
func (c *Calc) changeMembers(s *aset, before, now []nftdp.Member) {
	for _, m := range now {
		if !slices.Contains(before, m) {
			c.sink.AddMember(s.spec.name, m)
			for _, g := range s.feeds {
				c.sink.AddMember(g, m)
			}
		}
	}
	for _, m := range before {
		if !slices.Contains(now, m) {
			c.sink.RemoveMember(s.spec.name, m)
			for _, g := range s.feeds {
				c.sink.RemoveMember(g, m)
			}
		}
	}
}

// eachMember calls fn with every member of s, once per endpoint or
// network set giving it.
func (c *Calc) eachMember(s *aset, fn func(nftdp.Member)) {
	c.matching(s.spec.m, func(e *endpoint) {
		for _, m := range s.membersOf(e) {
			fn(m)
		}
	})
	for _, ms := range s.nets {
		for _, m := range ms {
			fn(m)
		}
	}
}

// distinctMembers masks each member's prefix and drops repeats, keeping
// the first of each.
func distinctMembers(ms []nftdp.Member) []nftdp.Member {
	out := make([]nftdp.Member, 0, len(ms))
	var seen map[nftdp.Member]bool
	if len(ms) > 16 {
		seen = make(map[nftdp.Member]bool, len(ms))
	}
	for _, m := range ms {
		m.Prefix = m.Prefix.Masked()
		switch {
		case seen != nil && !seen[m]:
			seen[m] = true
			out = append(out, m)
		case seen == nil && !slices.Contains(out, m):
			out = append(out, m)
		}
	}
	return out
}

func (s *aset) endpointMembers(e *endpoint) []nftdp.Member {
	if !s.spec.m.group(e.g) {
		return nil
	}
	return s.membersOf(e)
}

// membersOf is what e gives the set if its selector picks e: distinct
// and masked (see changeMembers).
func (s *aset) membersOf(e *endpoint) []nftdp.Member {
	var out []nftdp.Member
	for ip := range e.prefixes() {
		if s.spec.kind == nftdp.AddrSet {
			out = append(out, nftdp.Member{Prefix: ip})
			continue
		}
		for _, p := range e.g.ports {
			if p.Name == s.spec.port && (s.spec.proto == 0 || p.Proto == s.spec.proto) {
				out = append(out, nftdp.Member{Prefix: ip, Proto: p.Proto, Port: p.Port})
			}
		}
	}
	return distinctMembers(out)
}

func (s *aset) netsetMembers(n *netset) []nftdp.Member {
	if s.spec.kind != nftdp.AddrSet || !s.spec.m.netset(n) {
		return nil
	}
	out := make([]nftdp.Member, 0, len(n.Nets))
	for _, p := range n.Nets {
		out = append(out, nftdp.Member{Prefix: p})
	}
	return out
}

// onlyFamily is 4 or 6 when all the endpoint's addresses are of that
// family, else 0.
func (e *endpoint) onlyFamily() uint8 {
	var v4, v6 bool
	for p := range e.prefixes() {
		v4 = v4 || p.Addr().Is4()
		v6 = v6 || !p.Addr().Is4()
	}
	switch {
	case v4 && !v6:
		return 4
	case v6 && !v4:
		return 6
	}
	return 0
}
