package flowrec

import (
	"maps"
	"slices"
)

// MaxLabelBytes bounds the labels an end carries in a record (keys and
// values together): a tenant's pod with large labels must not make its
// records, or its node's whole batch, too large to keep.
const MaxLabelBytes = 4 << 10

// capLabels returns labels if they fit MaxLabelBytes, else a new map
// of those that fit in key order and true. labels is shared with the
// policy model and never changed.
func capLabels(labels map[string]string) (map[string]string, bool) {
	n := 0
	for k, v := range labels {
		n += len(k) + len(v)
	}
	if n <= MaxLabelBytes {
		return labels, false
	}
	out := map[string]string{}
	n = 0
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if n+len(k)+len(labels[k]) > MaxLabelBytes {
			continue
		}
		out[k] = labels[k]
		n += len(k) + len(labels[k])
	}
	return out, true
}
