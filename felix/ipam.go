package felix

import "github.com/routed-net/routed/pkg/ipam"

// OnAffinitySnapshot takes every block affinity (all nodes'); with
// OnAffinityUpdate it makes a Felix an ipam.AffinityHandler, which the
// node feed delivers them to.
func (f *Felix) OnAffinitySnapshot(all []ipam.Affinity) {
	out := make([]BlockAffinity, 0, len(all))
	for _, a := range all {
		out = append(out, BlockAffinity(a))
	}
	f.ReplaceAffinities(out)
}

// OnAffinityUpdate takes one affinity change from pkg/ipam.
func (f *Felix) OnAffinityUpdate(a ipam.Affinity, deleted bool) {
	f.UpdateAffinity(BlockAffinity(a), deleted)
}

var _ ipam.AffinityHandler = (*Felix)(nil)
