package policy

import (
	"hash/maphash"
	"maps"
	"slices"
	"strings"
)

// Label sets are shared: the calculator holds every distinct map of
// labels it derives (an endpoint group's effective labels, its
// namespace's and its service account's) once, however many groups have
// it: a namespace's labels are one map for all its pods.

// labelSet is an immutable map of labels with the references to it
// counted. Nobody may change m.
type labelSet struct {
	m    map[string]string
	hash uint64
	refs int
}

// labelSets interns label sets by content.
type labelSets struct {
	seed   maphash.Seed
	byHash map[uint64][]*labelSet
}

func newLabelSets(seed maphash.Seed) labelSets {
	return labelSets{seed: seed, byHash: map[uint64][]*labelSet{}}
}

// hashLabels hashes a map independently of its iteration order.
func hashLabels(seed maphash.Seed, m map[string]string) uint64 {
	var sum uint64
	for k, v := range m {
		sum += maphash.String(seed, k)*0x9e3779b97f4a7c15 ^ maphash.String(seed, v)
	}
	return sum
}

// get takes a reference on the set equal to m. When there is none, m
// becomes the new set's: the caller must not change it afterwards.
func (t *labelSets) get(m map[string]string) *labelSet {
	h := hashLabels(t.seed, m)
	for _, s := range t.byHash[h] {
		if maps.Equal(s.m, m) {
			s.refs++
			return s
		}
	}
	s := &labelSet{m: m, hash: h, refs: 1}
	t.byHash[h] = append(t.byHash[h], s)
	return s
}

// put drops a reference taken by get; the last one removes the set.
func (t *labelSets) put(s *labelSet) {
	if s == nil {
		return
	}
	if s.refs--; s.refs > 0 {
		return
	}
	list := slices.DeleteFunc(t.byHash[s.hash], func(x *labelSet) bool { return x == s })
	if len(list) == 0 {
		delete(t.byHash, s.hash)
	} else {
		t.byHash[s.hash] = list
	}
}

// label is one label of an endpoint's own.
type label struct{ k, v string }

// pack copies strs, in place, into one string that the copies share:
// one allocation for all of a group's strings, and none of the caller's
// (the decoded resource's) kept.
func pack(strs []*string) {
	n := 0
	for _, s := range strs {
		n += len(*s)
	}
	var b strings.Builder
	b.Grow(n)
	for _, s := range strs {
		b.WriteString(*s)
	}
	all, off := b.String(), 0
	for _, s := range strs {
		l := len(*s)
		if l > 0 {
			*s = all[off : off+l]
		}
		off += l
	}
}
