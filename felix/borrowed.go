package felix

import (
	"net/netip"

	"github.com/routed-net/routed/pkg/ipam"
)

// OnBorrowedSnapshot takes every block's borrowed addresses from
// pkg/ipam; with OnBorrowedBlock it makes a Felix an ipam.BorrowHandler
// to pass to ipam.WatchBorrowed. The import guard accepts a learned /32
// inside another node's block only when IPAM says it is borrowed by the
// node at the route's next hop.
func (f *Felix) OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string) {
	f.enqueue(func(l *loop) {
		l.st.borrowed = all
		l.planDirty = true
	})
}

// OnBorrowedBlock takes one block's borrowed addresses.
func (f *Felix) OnBorrowedBlock(block netip.Prefix, borrowed map[netip.Addr]string) {
	f.enqueue(func(l *loop) {
		if len(borrowed) == 0 {
			delete(l.st.borrowed, block)
		} else {
			l.st.borrowed[block] = borrowed
		}
		l.planDirty = true
	})
}

var _ ipam.BorrowHandler = (*Felix)(nil)
