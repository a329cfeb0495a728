package policy

import (
	"iter"
	"maps"
	"slices"
)

// profileLabels are a profile's labelsToApply, or a scope's (merged
// from its profiles'), sorted by key, as key, value, key, value..., the
// strings packed into one allocation. A profile's are only copied (into
// its scopes', its namespace's network sets') and compared; a scope's
// are looked up too, by binary search. Kept as maps (a header, a group
// and, a profile's, its decoded strings: four to ten small objects
// each; 7,000 profiles and as many scopes in felix's
// BenchmarkRemoteEndpoints), they were made with the snapshot's
// decoding, among its garbage of the same sizes, and kept its pages in
// use after it went (issue 36). Nobody may change one.
type profileLabels []string

func packProfileLabels(m map[string]string) profileLabels {
	if len(m) == 0 {
		return nil
	}
	out := make(profileLabels, 0, 2*len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k, m[k])
	}
	strs := make([]*string, len(out))
	for i := range out {
		strs[i] = &out[i]
	}
	pack(strs)
	return out
}

// all yields every label, in key order.
func (l profileLabels) all() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for i := 0; i+1 < len(l); i += 2 {
			if !yield(l[i], l[i+1]) {
				return
			}
		}
	}
}

func (l profileLabels) equal(o profileLabels) bool { return slices.Equal(l, o) }

// get returns the value of label k.
func (l profileLabels) get(k string) (string, bool) {
	lo, hi := 0, len(l)/2
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if l[2*m] < k {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if 2*lo < len(l) && l[2*lo] == k {
		return l[2*lo+1], true
	}
	return "", false
}

// len is the number of labels.
func (l profileLabels) len() int { return len(l) / 2 }
