package policy

import (
	"hash/maphash"
	"slices"
)

// The group index: what a selector decides about an endpoint depends
// only on its group (see group: its labels, its namespace's and service
// account's labels, and the namespace and service account names; see
// matcher.group), so the replicas of a Deployment get the same answers
// and share one copy of what they are asked about. The calculator asks
// once per group and remembers: which active sets select it (a new
// pod's memberships) and which policies apply to it (a new local pod's
// chains), instead of evaluating every active set's and every policy's
// selector for each pod. An answer is recomputed when the sets or the
// policies changed since it was made (a generation number each); a
// group lives while it has an endpoint.

// groupIndex holds the groups, and their scopes, by a hash of what
// makes them one.
type groupIndex struct {
	setGen, polGen int
	seed           maphash.Seed
	byHash         map[uint64][]*group
	scopes         map[uint64][]*groupScope
}

// scopeHash hashes what puts an endpoint's group in a scope.
func (x *groupIndex) scopeHash(ep *Endpoint) uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteString(ep.Namespace)
	h.WriteByte(0)
	h.WriteString(ep.ServiceAccount)
	if ep.Host {
		h.WriteByte(2)
	}
	for _, p := range ep.Profiles {
		h.WriteByte(0)
		h.WriteString(p)
	}
	return h.Sum64()
}

// groupHash hashes what puts an endpoint in a group: its scope (sh),
// named ports and labels.
func (x *groupIndex) groupHash(sh uint64, ep *Endpoint) uint64 {
	var h maphash.Hash
	h.SetSeed(x.seed)
	h.WriteByte(1)
	for _, p := range ep.Ports {
		h.WriteString(p.Name)
		h.WriteByte(0)
		h.WriteByte(p.Proto)
		h.WriteByte(byte(p.Port >> 8))
		h.WriteByte(byte(p.Port))
	}
	return sh ^ h.Sum64() ^ hashLabels(x.seed, ep.Labels)
}

// is reports whether ep belongs in s.
func (s *groupScope) is(ep *Endpoint) bool {
	return s.ns == ep.Namespace && s.sa == ep.ServiceAccount && s.host == ep.Host && slices.Equal(s.profiles, ep.Profiles)
}

// is reports whether ep belongs in g.
func (g *group) is(ep *Endpoint) bool {
	return g.sc.is(ep) && slices.Equal(g.ports, ep.Ports) && g.own.equal(ep.Labels)
}

// scopeOf returns ep's scope, made (and derived) when new; it has no
// group until one is added.
func (c *Calc) scopeOf(ep *Endpoint, h uint64) *groupScope {
	for _, s := range c.groups.scopes[h] {
		if s.is(ep) {
			return s
		}
	}
	s := &groupScope{hash: h, ns: ep.Namespace, sa: ep.ServiceAccount, host: ep.Host, profiles: slices.Clone(ep.Profiles)}
	strs := []*string{&s.ns, &s.sa}
	for i := range s.profiles {
		strs = append(strs, &s.profiles[i])
	}
	pack(strs)
	c.deriveScope(s)
	c.groups.scopes[h] = append(c.groups.scopes[h], s)
	c.holdProfiles(s)
	return s
}

// groupOf returns ep's group, made (and derived) when new; it has no
// endpoint until one is added.
func (c *Calc) groupOf(ep *Endpoint) *group {
	sh := c.groups.scopeHash(ep)
	h := c.groups.groupHash(sh, ep)
	for _, g := range c.groups.byHash[h] {
		if g.is(ep) {
			return g
		}
	}
	s := c.scopeOf(ep, sh)
	g := &group{hash: h, sc: s, ns: s.ns, sa: s.sa, host: s.host, profiles: s.profiles, setGen: -1,
		ports: slices.Clone(ep.Ports), own: makeOwnLabels(c.keys, ep.Labels)}
	strs := []*string{&g.own.s}
	for i := range g.ports {
		strs = append(strs, &g.ports[i].Name)
	}
	pack(strs)
	c.derive(g)
	c.groups.byHash[h] = append(c.groups.byHash[h], g)
	g.scIdx = int32(len(s.groups))
	s.groups = append(s.groups, g)
	return g
}

// addTo puts e in its group.
func (c *Calc) addTo(e *endpoint) {
	e.idx = uint32(len(e.g.eps))
	e.g.eps = append(e.g.eps, e)
}

// removeFrom takes e out of its group; a group left empty goes, and a
// scope left without a group.
func (c *Calc) removeFrom(e *endpoint) {
	g := e.g
	g.eps = swapRemove(g.eps, int(e.idx), func(o *endpoint, i int) { o.idx = uint32(i) })
	if len(g.eps) > 0 {
		if cap(g.eps) > 16 && len(g.eps) < cap(g.eps)/4 {
			g.eps = slices.Clip(g.eps)
		}
		return
	}
	dropFromBucket(c.groups.byHash, g.hash, g)
	for _, s := range []*labelSet{g.nsLabels, g.saLabels} {
		c.labelSets.put(s)
	}
	s := g.sc
	g.own.release()
	s.groups = swapRemove(s.groups, int(g.scIdx), func(o *group, i int) { o.scIdx = int32(i) })
	if len(s.groups) > 0 {
		return
	}
	dropFromBucket(c.groups.scopes, s.hash, s)
	c.releaseProfiles(s)
	for _, ls := range []*labelSet{s.nsLabels, s.saLabels} {
		c.labelSets.put(ls)
	}
}

// swapRemove takes list[i] out by moving the last element to its place
// (moved tells it its new position) and returns the shorter list.
func swapRemove[T any](list []T, i int, moved func(T, int)) []T {
	last := len(list) - 1
	list[i] = list[last]
	moved(list[i], i)
	var zero T
	list[last] = zero
	return list[:last]
}

// dropFromBucket takes v out of m[h], deleting the bucket when it is
// left empty.
func dropFromBucket[T comparable](m map[uint64][]T, h uint64, v T) {
	if list := slices.DeleteFunc(m[h], func(x T) bool { return x == v }); len(list) > 0 {
		m[h] = list
	} else {
		delete(m, h)
	}
}

// matching calls fn for every endpoint m picks, asking m once per
// group: every endpoint in it gets the same answer.
func (c *Calc) matching(m *matcher, fn func(*endpoint)) {
	for _, list := range c.groups.byHash {
		for _, g := range list {
			if len(g.eps) > 0 && m.group(g) {
				for _, e := range g.eps {
					fn(e)
				}
			}
		}
	}
}

// setsFor lists the active sets whose matcher picks g. The caller must
// not change the slice.
func (c *Calc) setsFor(g *group) []*aset {
	if g.setGen == c.groups.setGen {
		return g.sets
	}
	var out []*aset
	for _, s := range c.sets {
		if s.spec.m.group(g) {
			out = append(out, s)
		}
	}
	g.sets, g.setGen = out, c.groups.setGen
	return out
}

// policiesFor lists the policies that apply to g, in evaluation order,
// per direction; the slices are the caller's.
func (c *Calc) policiesFor(g *group) (in, out []*cpolicy) {
	if g.pols == nil || g.pols.gen != c.groups.polGen {
		in, out := c.evalPolicies(g)
		g.pols = &groupPolicies{gen: c.groups.polGen, in: in, out: out}
	}
	return slices.Clone(g.pols.in), slices.Clone(g.pols.out)
}

// evalPolicies evaluates every policy's selector for g.
func (c *Calc) evalPolicies(g *group) (in, out []*cpolicy) {
	for _, p := range c.ordered {
		if (p.hasIn || p.hasOut) && p.picks(g) {
			if p.hasIn {
				in = append(in, p)
			}
			if p.hasOut {
				out = append(out, p)
			}
		}
	}
	return in, out
}
