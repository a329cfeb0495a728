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

// groupIndex holds the groups by a hash of what makes them one.
type groupIndex struct {
	setGen, polGen int
	seed           maphash.Seed
	byHash         map[uint64][]*group
}

// groupHash hashes what puts an endpoint in a group.
func (x *groupIndex) groupHash(ep *Endpoint) uint64 {
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
	h.WriteByte(1)
	for _, p := range ep.Ports {
		h.WriteString(p.Name)
		h.WriteByte(0)
		h.WriteByte(p.Proto)
		h.WriteByte(byte(p.Port >> 8))
		h.WriteByte(byte(p.Port))
	}
	return h.Sum64() ^ hashLabels(x.seed, ep.Labels)
}

// is reports whether ep belongs in g.
func (g *group) is(ep *Endpoint) bool {
	if g.ns != ep.Namespace || g.sa != ep.ServiceAccount || g.host != ep.Host || !slices.Equal(g.profiles, ep.Profiles) ||
		!slices.Equal(g.ports, ep.Ports) {
		return false
	}
	return g.own.equal(ep.Labels)
}

// groupOf returns ep's group, made (and derived) when new; it has no
// endpoint until one is added.
func (c *Calc) groupOf(ep *Endpoint) *group {
	h := c.groups.groupHash(ep)
	for _, g := range c.groups.byHash[h] {
		if g.is(ep) {
			return g
		}
	}
	g := &group{hash: h, ns: ep.Namespace, sa: ep.ServiceAccount, host: ep.Host, setGen: -1,
		profiles: slices.Clone(ep.Profiles), ports: slices.Clone(ep.Ports), own: makeOwnLabels(ep.Labels)}
	strs := []*string{&g.ns, &g.sa, &g.own.s}
	for i := range g.profiles {
		strs = append(strs, &g.profiles[i])
	}
	for i := range g.ports {
		strs = append(strs, &g.ports[i].Name)
	}
	pack(strs)
	c.derive(g)
	c.groups.byHash[h] = append(c.groups.byHash[h], g)
	c.holdProfiles(g)
	return g
}

// addTo puts e in its group.
func (c *Calc) addTo(e *endpoint) {
	e.idx = len(e.g.eps)
	e.g.eps = append(e.g.eps, e)
}

// removeFrom takes e out of its group; a group left empty goes.
func (c *Calc) removeFrom(e *endpoint) {
	g := e.g
	last := g.eps[len(g.eps)-1]
	g.eps[e.idx], last.idx = last, e.idx
	g.eps[len(g.eps)-1] = nil
	g.eps = g.eps[:len(g.eps)-1]
	if len(g.eps) > 0 {
		if cap(g.eps) > 16 && len(g.eps) < cap(g.eps)/4 {
			g.eps = slices.Clip(g.eps)
		}
		return
	}
	list := slices.DeleteFunc(c.groups.byHash[g.hash], func(x *group) bool { return x == g })
	if len(list) == 0 {
		delete(c.groups.byHash, g.hash)
	} else {
		c.groups.byHash[g.hash] = list
	}
	c.releaseProfiles(g)
	for _, s := range []*labelSet{g.labels, g.nsLabels, g.saLabels} {
		c.labelSets.put(s)
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
