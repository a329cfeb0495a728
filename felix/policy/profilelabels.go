package policy

import (
	"iter"
	"maps"
	"slices"
)

// profileLabels are a profile's labelsToApply, sorted by key, as key,
// value, key, value..., the strings packed into one allocation. Nothing
// looks a profile's label up by key: its labels are only copied (into
// its scopes', its namespace's network sets') and compared, so they
// need no map. Kept as decoded (a map, its group and its strings: four
// to ten small objects per profile, 7,000 profiles in felix's
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
