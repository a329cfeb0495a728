package daemon

import (
	"context"
	"net/netip"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// The gates put the datastoreGuard in front of each feed into felix and
// the speaker. A snapshot passes only once the datastore is verified; an
// event that removes something passes only if the datastore is still
// the one this node knows (a wipe arrives as deletes, possibly before
// the identity's own delete, since each kind is its own watch); while
// frozen nothing passes, and the feeds restart when it thaws.

type gatedFeed struct {
	g *datastoreGuard
	h datastore.Handler
}

func (f gatedFeed) OnSnapshot(s datastore.Snapshot) {
	// Rollback is judged on the datastore's current revision, not the
	// snapshot's: each feed lists at its own moment, so an older
	// snapshot than another feed's is normal.
	if ok, _ := f.g.verify(context.Background(), 0); ok {
		f.g.seen(s.Revision)
		f.h.OnSnapshot(s)
	}
}

func (f gatedFeed) OnEvent(e datastore.Event) {
	if !f.g.pass(e.Type == datastore.EventDelete) {
		return
	}
	f.g.seen(e.Revision)
	f.h.OnEvent(e)
}

type gatedAffinities struct {
	g *datastoreGuard
	h ipam.AffinityHandler
}

func (f gatedAffinities) OnAffinitySnapshot(all []ipam.Affinity) {
	if ok, _ := f.g.verify(context.Background(), 0); ok {
		f.h.OnAffinitySnapshot(all)
	}
}

func (f gatedAffinities) OnAffinityUpdate(a ipam.Affinity, deleted bool) {
	if f.g.pass(deleted) {
		f.h.OnAffinityUpdate(a, deleted)
	}
}

type gatedBorrows struct {
	g *datastoreGuard
	h ipam.BorrowHandler
}

func (f gatedBorrows) OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string) {
	if ok, _ := f.g.verify(context.Background(), 0); ok {
		f.h.OnBorrowedSnapshot(all)
	}
}

func (f gatedBorrows) OnBorrowedBlock(b netip.Prefix, br map[netip.Addr]string) {
	if f.g.pass(len(br) == 0) {
		f.h.OnBorrowedBlock(b, br)
	}
}

// pass decides whether an event goes through: never while frozen, and a
// removal only after the datastore checked out.
func (g *datastoreGuard) pass(removal bool) bool {
	if frozen, _ := g.Frozen(); frozen {
		return false
	}
	if !removal {
		return true
	}
	ok, _ := g.verify(context.Background(), 0)
	return ok
}
