package daemon

import (
	"net/netip"
	"slices"

	"github.com/routed-net/routed/pkg/ipam"
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

// borrowFanout hands every block's borrowed addresses to felix (its
// import guard) and this node's own to the speaker, which advertises
// them: both from block events, so no node scans IPAM on a timer.
type borrowFanout struct {
	node    string
	felix   ipam.BorrowHandler
	speaker interface{ SetBorrowedIPs([]netip.Addr) }
	// mine is this node's borrowed addresses, per block. Only the watch
	// goroutine touches it.
	mine map[netip.Prefix][]netip.Addr
}

func (f *borrowFanout) OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string) {
	f.mine = map[netip.Prefix][]netip.Addr{}
	for b, br := range all {
		f.keep(b, br)
	}
	f.felix.OnBorrowedSnapshot(all)
	f.publish()
}

func (f *borrowFanout) OnBorrowedBlock(b netip.Prefix, br map[netip.Addr]string) {
	had := len(f.mine[b])
	f.keep(b, br)
	f.felix.OnBorrowedBlock(b, br)
	if had > 0 || len(f.mine[b]) > 0 {
		f.publish()
	}
}

func (f *borrowFanout) keep(b netip.Prefix, br map[netip.Addr]string) {
	delete(f.mine, b)
	for a, n := range br {
		if n == f.node {
			f.mine[b] = append(f.mine[b], a)
		}
	}
}

func (f *borrowFanout) publish() {
	var all []netip.Addr
	for _, as := range f.mine {
		all = append(all, as...)
	}
	slices.SortFunc(all, netip.Addr.Compare)
	f.speaker.SetBorrowedIPs(all)
}
