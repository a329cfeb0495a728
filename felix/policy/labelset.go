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

// labelKeys numbers the label keys of a calculator's groups' own
// labels, with the groups holding each counted: a cluster has a few
// dozen keys (app, app.kubernetes.io/name, projectcalico.org/namespace,
// ...) that every group repeats.
type labelKeys struct {
	ids   map[string]uint32
	names []string
	refs  []int32
	free  []uint32
}

func newLabelKeys() *labelKeys { return &labelKeys{ids: map[string]uint32{}} }

// ref returns k's number, taking a reference on it.
func (t *labelKeys) ref(k string) uint32 {
	id, ok := t.ids[k]
	if !ok {
		k = strings.Clone(k) // not the caller's
		if n := len(t.free); n > 0 {
			id, t.free = t.free[n-1], t.free[:n-1]
			t.names[id] = k
		} else {
			id = uint32(len(t.names))
			t.names, t.refs = append(t.names, k), append(t.refs, 0)
		}
		t.ids[k] = id
	}
	t.refs[id]++
	return id
}

// unref drops a reference taken by ref; the last one frees the number.
func (t *labelKeys) unref(id uint32) {
	if t.refs[id]--; t.refs[id] > 0 {
		return
	}
	delete(t.ids, t.names[id])
	t.names[id] = ""
	t.free = append(t.free, id)
}

// ownLabels are an endpoint group's own labels in one string: for each,
// in key order, its key's number (labelKeys) and its value's length as
// uvarints, then the value. A number stands for one key while any group
// holds it and the lengths make the encoding prefix-free, so two
// different label sets never have the same string. A label costs a few
// bytes besides its value, where a map entry costs 32 and more.
type ownLabels struct {
	s    string
	keys *labelKeys
}

func makeOwnLabels(keys *labelKeys, m map[string]string) ownLabels {
	names := slices.Sorted(maps.Keys(m))
	n := 0
	for _, k := range names {
		n += len(m[k]) + 2*binary.MaxVarintLen32
	}
	b := make([]byte, 0, n)
	for _, k := range names {
		b = binary.AppendUvarint(b, uint64(keys.ref(k)))
		b = binary.AppendUvarint(b, uint64(len(m[k])))
		b = append(b, m[k]...)
	}
	return ownLabels{s: string(b), keys: keys}
}

// release drops the references on the labels' keys.
func (o ownLabels) release() {
	for off := 0; off < len(o.s); {
		var id uint32
		id, _, off = o.next(off)
		o.keys.unref(id)
	}
}

// next decodes the label at off: its key's number, its value and where
// the next one starts.
func (o ownLabels) next(off int) (id uint32, v string, end int) {
	var n uint64
	n, off = o.uvarint(off)
	id = uint32(n)
	n, off = o.uvarint(off)
	end = off + int(n)
	return id, o.s[off:end], end
}

func (o ownLabels) uvarint(off int) (uint64, int) {
	var n uint64
	for shift := 0; ; shift += 7 {
		c := o.s[off]
		off++
		n |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return n, off
		}
	}
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
			var id uint32
			var v string
			id, v, off = o.next(off)
			if !yield(o.keys.names[id], v) {
				return
			}
		}
	}
}

// get returns the value of label key and whether there is one.
func (o ownLabels) get(key string) (string, bool) {
	want, ok := o.keys.ids[key]
	if !ok {
		return "", false // no group has such a label
	}
	for off := 0; off < len(o.s); {
		var id uint32
		var v string
		id, v, off = o.next(off)
		if id == want {
			return v, true
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
