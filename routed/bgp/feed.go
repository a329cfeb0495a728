package bgp

import (
	"net/netip"
	"slices"

	"github.com/routed-net/routed/pkg/feed"
)

// Consumer is the speaker's subscription to the node feed: block
// affinities (this node's confirmed blocks are advertised) and borrowed
// addresses (this node's are advertised as host routes), in one ordered
// stream.
func (s *Speaker) Consumer() feed.Dispatch {
	return feed.Dispatch{Affinities: s, Borrowed: newBorrowedAddrs(s.cfg.NodeName, s.SetBorrowedIPs)}
}

// borrowedAddrs keeps, per block, the addresses this node holds in other
// nodes' blocks, and hands the speaker the whole list when it changes.
// Only the feed's delivery goroutine touches it.
type borrowedAddrs struct {
	node string
	set  func([]netip.Addr)
	mine map[netip.Prefix][]netip.Addr
}

func newBorrowedAddrs(node string, set func([]netip.Addr)) *borrowedAddrs {
	return &borrowedAddrs{node: node, set: set, mine: map[netip.Prefix][]netip.Addr{}}
}

// OnBorrowedSnapshot implements ipam.BorrowHandler.
func (b *borrowedAddrs) OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string) {
	b.mine = map[netip.Prefix][]netip.Addr{}
	for p, br := range all {
		b.keep(p, br)
	}
	b.publish()
}

// OnBorrowedBlock implements ipam.BorrowHandler.
func (b *borrowedAddrs) OnBorrowedBlock(p netip.Prefix, br map[netip.Addr]string) {
	had := len(b.mine[p])
	b.keep(p, br)
	if had > 0 || len(b.mine[p]) > 0 {
		b.publish()
	}
}

func (b *borrowedAddrs) keep(p netip.Prefix, br map[netip.Addr]string) {
	delete(b.mine, p)
	for a, n := range br {
		if n == b.node {
			b.mine[p] = append(b.mine[p], a)
		}
	}
}

func (b *borrowedAddrs) publish() {
	var all []netip.Addr
	for _, as := range b.mine {
		all = append(all, as...)
	}
	slices.SortFunc(all, netip.Addr.Compare)
	b.set(all)
}
