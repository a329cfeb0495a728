package daemon

import "github.com/routed-net/routed/pkg/ipam"

// affinityFanout hands each affinity change to felix and the speaker.
type affinityFanout struct {
	handlers []ipam.AffinityHandler
}

func (f *affinityFanout) OnAffinitySnapshot(all []ipam.Affinity) {
	for _, h := range f.handlers {
		h.OnAffinitySnapshot(all)
	}
}

func (f *affinityFanout) OnAffinityUpdate(a ipam.Affinity, deleted bool) {
	for _, h := range f.handlers {
		h.OnAffinityUpdate(a, deleted)
	}
}
