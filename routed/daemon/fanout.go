package daemon

import (
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/bgp"
)

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

// speakerAffinities adapts the speaker, which has its own Affinity type so
// that it does not depend on IPAM, to ipam.AffinityHandler.
type speakerAffinities struct{ s *bgp.Speaker }

func toBGP(a ipam.Affinity) bgp.Affinity {
	return bgp.Affinity{Node: a.Node, CIDR: a.CIDR, State: a.State}
}

func (s speakerAffinities) OnAffinitySnapshot(all []ipam.Affinity) {
	out := make([]bgp.Affinity, len(all))
	for i, a := range all {
		out[i] = toBGP(a)
	}
	s.s.OnAffinitySnapshot(out)
}

func (s speakerAffinities) OnAffinityUpdate(a ipam.Affinity, deleted bool) {
	s.s.OnAffinityUpdate(toBGP(a), deleted)
}
