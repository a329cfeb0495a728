package policy

import (
	"maps"
	"slices"
	"strings"
)

// A label index: what a selector decides about an endpoint depends only
// on the endpoint's labels, its namespace's and its service account's
// labels, and the namespace and service account names (see
// matcher.endpoint), so endpoints equal in those (the replicas of a
// Deployment, the pods of a namespace with the same app label) get the
// same answers. The calculator asks once per distinct label key and
// remembers: which active sets select the key (a new pod's memberships)
// and which policies apply to it (a new local pod's chains), instead
// of evaluating every active set's and every policy's selector for each
// pod. An answer is recomputed when the sets or the policies changed
// since it was made (a generation number each); an entry lives while an
// endpoint with its key does.

// labelIndex holds the answers per label key.
type labelIndex struct {
	setGen, polGen int
	byKey          map[string]*labelEntry
}

type labelEntry struct {
	refs int // endpoints in Calc.eps with this key
	// The endpoints with this key (Calc.eps' entries), so that a new
	// set asks its selector once per key, not once per endpoint.
	eps map[string]*endpoint
	// Active sets selecting the key, as of setGen.
	setGen int
	sets   []*aset
	// Policies applying to the key in evaluation order, as of polGen.
	polGen  int
	in, out []*cpolicy
}

// labelKey is what every matcher sees of an endpoint, as one string.
func labelKey(e *endpoint) string {
	var b strings.Builder
	b.WriteString(e.Namespace)
	b.WriteByte(0)
	b.WriteString(e.ServiceAccount)
	for _, m := range []map[string]string{e.labels, e.nsLabels, e.saLabels} {
		b.WriteByte(1)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			b.WriteString(k)
			b.WriteByte(0)
			b.WriteString(m[k])
			b.WriteByte(0)
		}
	}
	return b.String()
}

// hold takes a reference on e's entry (made empty when new).
func (x *labelIndex) hold(e *endpoint) {
	le := x.byKey[e.key]
	if le == nil {
		le = &labelEntry{setGen: -1, polGen: -1, eps: map[string]*endpoint{}}
		x.byKey[e.key] = le
	}
	le.refs++
	le.eps[e.Key] = e
}

// release drops a reference taken by hold.
func (x *labelIndex) release(e *endpoint) {
	if le := x.byKey[e.key]; le != nil {
		// A replacement with the same key was held first: keep it.
		if le.eps[e.Key] == e {
			delete(le.eps, e.Key)
		}
		if le.refs--; le.refs <= 0 {
			delete(x.byKey, e.key)
		}
	}
}

// matching calls fn for every endpoint m picks, asking m once per label
// key: every endpoint with the key gets the same answer.
func (x *labelIndex) matching(m *matcher, fn func(*endpoint)) {
	for _, le := range x.byKey {
		for _, rep := range le.eps {
			if m.endpoint(rep) {
				for _, e := range le.eps {
					fn(e)
				}
			}
			break // one is enough to ask
		}
	}
}

// setsFor lists the active sets whose matcher picks e. The caller must
// not change the slice.
func (c *Calc) setsFor(e *endpoint) []*aset {
	le := c.labels.byKey[e.key]
	if le != nil && le.setGen == c.labels.setGen {
		return le.sets
	}
	var out []*aset
	for _, s := range c.sets {
		if s.spec.m.endpoint(e) {
			out = append(out, s)
		}
	}
	if le != nil {
		le.sets, le.setGen = out, c.labels.setGen
	}
	return out
}

// policiesFor lists the policies that apply to an endpoint, in
// evaluation order, per direction; the slices are the caller's.
func (c *Calc) policiesFor(e *endpoint) (in, out []*cpolicy) {
	le := c.labels.byKey[e.key]
	if le == nil || le.polGen != c.labels.polGen {
		in, out = c.evalPolicies(e)
		if le == nil {
			return in, out
		}
		le.in, le.out, le.polGen = in, out, c.labels.polGen
	}
	return slices.Clone(le.in), slices.Clone(le.out)
}

// evalPolicies evaluates every policy's selector for e.
func (c *Calc) evalPolicies(e *endpoint) (in, out []*cpolicy) {
	for _, p := range c.ordered {
		if (p.hasIn || p.hasOut) && p.sel.endpoint(e) {
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
