package feed

import (
	"net/netip"
	"sync"

	"github.com/routed-net/routed/pkg/ipam"
)

// tallies holds every block's ipam.BlockTally as the feed last read the
// block: about 60 bytes a block (5,000 blocks at 150,000 pods: 0.3 MB),
// for the elected node's usage metrics (BlockTallies).
type tallies struct {
	mu sync.Mutex
	m  map[netip.Prefix]ipam.BlockTally
	// old is the map a list replaces, put back when the list is cut
	// short; while a list is read neither is whole (ok false).
	old map[netip.Prefix]ipam.BlockTally
	ok  bool
}

// listing starts a list: the tallies are made again from it.
func (t *tallies) listing() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.old, t.m, t.ok = t.m, map[netip.Prefix]ipam.BlockTally{}, false
}

// listed ends a list: read whole, or cut short (the old tallies stand).
func (t *tallies) listed(whole bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !whole {
		t.m = t.old
	}
	t.old, t.ok = nil, t.m != nil
}

func (t *tallies) set(p netip.Prefix, v ipam.BlockTally, deleted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		return // no list yet: the first one makes the map
	}
	if deleted {
		delete(t.m, p)
	} else {
		t.m[p] = v
	}
}

// BlockTallies hands fn every block's tally as the feed last read it
// (an ipam.Tallies). It reports false, calling fn for none, when the
// feed has no whole list of the blocks: it does not read them (no
// consumer takes borrowed addresses), has not listed them yet, is
// listing them, or holds its consumers (the datastore is not trusted).
func (f *Feed) BlockTallies(fn func(netip.Prefix, ipam.BlockTally)) bool {
	if !f.kinds[KindBorrowed] || !f.synced.Load() || f.held.Load() {
		return false
	}
	f.tallies.mu.Lock()
	defer f.tallies.mu.Unlock()
	if !f.tallies.ok {
		return false
	}
	for p, v := range f.tallies.m {
		fn(p, v)
	}
	return true
}
