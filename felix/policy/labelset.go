package policy

import (
	"hash/maphash"
	"iter"
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

// ownLabels are an endpoint's own labels, sorted by key: the keys and
// values end to end in one string, and their lengths (each label costs
// 8 bytes besides its text, where a pair of strings costs 32).
type ownLabels struct {
	s    string
	lens []uint32 // key, value, key, value...
}

func makeOwnLabels(m map[string]string) ownLabels {
	o := ownLabels{lens: make([]uint32, 0, 2*len(m))}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString(k)
		b.WriteString(m[k])
		o.lens = append(o.lens, uint32(len(k)), uint32(len(m[k])))
	}
	o.s = b.String()
	return o
}

func (o ownLabels) len() int { return len(o.lens) / 2 }

// all yields the labels in key order.
func (o ownLabels) all() iter.Seq2[string, string] {
	return func(yield func(k, v string) bool) {
		off := uint32(0)
		for i := 0; i < len(o.lens); i += 2 {
			kl, vl := o.lens[i], o.lens[i+1]
			if !yield(o.s[off:off+kl], o.s[off+kl:off+kl+vl]) {
				return
			}
			off += kl + vl
		}
	}
}

// equal reports whether m holds exactly these labels.
func (o ownLabels) equal(m map[string]string) bool {
	if o.len() != len(m) {
		return false
	}
	for k, v := range o.all() {
		if w, ok := m[k]; !ok || w != v {
			return false
		}
	}
	return true
}

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
