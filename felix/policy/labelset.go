package policy

import (
	"encoding/binary"
	"hash/maphash"
	"iter"
	"maps"
	"slices"
	"strings"
)

// Label sets are shared: the calculator holds every distinct map of
// namespace or service account labels it derives once, however many
// groups have it: a namespace's labels are one map for all its pods.

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

// ref takes another reference on s.
func (t *labelSets) ref(s *labelSet) *labelSet {
	s.refs++
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

// ownLabels are an endpoint group's own labels, sorted by key, in one
// string: each key and value preceded by its length as a uvarint. The
// lengths make the encoding prefix-free, so two different label sets
// never have the same string; a label costs a byte or two besides its
// text, where a map entry costs 32 and more.
type ownLabels struct{ s string }

func makeOwnLabels(m map[string]string) ownLabels {
	keys := slices.Sorted(maps.Keys(m))
	n := 0
	for _, k := range keys {
		n += len(k) + len(m[k]) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(m[k])))
		b = append(b, m[k]...)
	}
	return ownLabels{s: string(b)}
}

// next decodes the label at off: its key and value and where the next
// one starts.
func (o ownLabels) next(off int) (k, v string, end int) {
	k, off = o.field(off)
	v, off = o.field(off)
	return k, v, off
}

func (o ownLabels) field(off int) (string, int) {
	var n uint64
	for shift := 0; ; shift += 7 {
		c := o.s[off]
		off++
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			break
		}
	}
	end := off + int(n)
	return o.s[off:end], end
}

func (o ownLabels) len() int {
	n := 0
	for off := 0; off < len(o.s); n++ {
		_, _, off = o.next(off)
	}
	return n
}

// all yields the labels in key order.
func (o ownLabels) all() iter.Seq2[string, string] {
	return func(yield func(k, v string) bool) {
		for off := 0; off < len(o.s); {
			var k, v string
			k, v, off = o.next(off)
			if !yield(k, v) {
				return
			}
		}
	}
}

// get returns the value of label key and whether there is one.
func (o ownLabels) get(key string) (string, bool) {
	for off := 0; off < len(o.s); {
		var k, v string
		k, v, off = o.next(off)
		switch {
		case k == key:
			return v, true
		case k > key:
			return "", false // sorted: it would have come
		}
	}
	return "", false
}

// hasKeyPrefix reports whether a label's key starts with one of prefixes.
func (o ownLabels) hasKeyPrefix(prefixes ...string) bool {
	for k := range o.all() {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
	}
	return false
}

// equal reports whether m holds exactly these labels.
func (o ownLabels) equal(m map[string]string) bool {
	n := 0
	for k, v := range o.all() {
		if w, ok := m[k]; !ok || w != v {
			return false
		}
		n++
	}
	return n == len(m)
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
