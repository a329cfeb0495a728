package feed

import (
	"net/netip"
	"sync"
	"time"

	"github.com/routed-net/routed/pkg/ipam"
)

// tallies holds every block's ipam.BlockTally as the feed last read the
// block: about 60 bytes a block (5,000 blocks at 150,000 pods: 0.3 MB),
// for the elected node's usage metrics (BlockTallies).
type tallies struct {
	mu sync.Mutex
	m  map[netip.Prefix]ipam.BlockTally
	// old is the map a list replaces: served while the list is read
	// (m is not whole then), put back when the list is cut short.
	old     map[netip.Prefix]ipam.BlockTally
	reading bool
}

// listing starts a list: the tallies are made again from it.
func (t *tallies) listing() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.old, t.m, t.reading = t.m, map[netip.Prefix]ipam.BlockTally{}, true
}

// listed ends a list: read whole, or cut short (the old tallies stand).
func (t *tallies) listed(whole bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !whole {
		t.m = t.old
	}
	t.old, t.reading = nil, false
}

// whole is the last whole list's tallies with the changes since, or nil.
func (t *tallies) whole() map[netip.Prefix]ipam.BlockTally {
	if t.reading {
		return t.old
	}
	return t.m
}

// set records a block read by a list (into the map being made) or by an
// event (lists and events come from the feed's one goroutine).
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

// BlockTallies hands fn every block's tally as the feed last read it (an
// ipam.Tallies), as of when the feed's watch last made progress (now
// when it has no heartbeat); while the feed lists the blocks again, the
// tallies of its last whole list. It reports false, calling fn for none,
// when it has no whole list: the feed does not read the blocks (no
// consumer takes borrowed addresses), has not listed them yet, or holds
// its consumers (the datastore is not trusted).
func (f *Feed) BlockTallies(fn func(netip.Prefix, ipam.BlockTally)) (time.Time, bool) {
	if !f.kinds[KindBorrowed] || !f.synced.Load() || f.held.Load() {
		return time.Time{}, false
	}
	now := time.Now()
	asOf := now
	if f.opt.Beat != nil {
		if age, ok := f.opt.Beat.Age(now); ok {
			asOf = now.Add(-age)
		}
	}
	f.tallies.mu.Lock()
	defer f.tallies.mu.Unlock()
	m := f.tallies.whole()
	if m == nil {
		return time.Time{}, false
	}
	for p, v := range m {
		fn(p, v)
	}
	return asOf, true
}
