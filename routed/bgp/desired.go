package bgp

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// desired is the state the speaker should converge to. Inputs (confd,
// the IPAM watch, the borrowed-address poller) write it from their own
// goroutines and kick the speaker's loop, which alone reads it and
// programs GoBGP. Writers never block on GoBGP: the latest state wins.
type desired struct {
	mu sync.Mutex
	// global is nil until confd first sets it.
	global *Global
	// peers is nil until confd first sets it.
	peers    []Peer
	peersSet bool
	// problem is why confd cannot configure BGP ("" when it can).
	problem  string
	services []netip.Prefix
	adverts  []PrefixCommunities
	filters  map[netip.Addr]PeerFilters
	noExport []netip.Prefix
	// blocks are the local node's confirmed affinities.
	blocks       map[netip.Prefix]bool
	blocksSynced bool
	borrowed     []netip.Addr

	kick chan struct{}
}

func newDesired() *desired {
	return &desired{blocks: map[netip.Prefix]bool{}, kick: make(chan struct{}, 1)}
}

// poke wakes the loop; a pending wake-up already covers this change.
func (d *desired) poke() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *desired) update(f func()) {
	d.mu.Lock()
	f()
	d.mu.Unlock()
	d.poke()
}

// pending reports whether the sessions have not been set yet, and what
// confd said stops it from setting them ("" when nothing does).
func (d *desired) pending() (bool, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.peersSet, d.problem
}

// snapshot is a copy of desired the loop can use without locking.
type snapshot struct {
	global       *Global
	peers        []Peer
	peersSet     bool
	blocksSynced bool
	// routes are all prefixes to originate, with next hop self, and the
	// communities each carries ("" for none).
	routes map[netip.Prefix]string
	// filters are the sessions' BGPFilter rules (not copied: SetFilters
	// replaces the map, never changes it).
	filters map[netip.Addr]PeerFilters
	// noExport are the CIDRs sent to no peer (SetNoExportCIDRs replaces
	// the slice, never changes it).
	noExport []netip.Prefix
}

func (d *desired) snapshot() snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := snapshot{peersSet: d.peersSet, blocksSynced: d.blocksSynced, routes: map[netip.Prefix]string{}}
	if d.global != nil {
		g := *d.global
		s.global = &g
	}
	s.peers = slices.Clone(d.peers)
	s.filters = d.filters
	s.noExport = d.noExport
	add := func(p netip.Prefix) { s.routes[p] = strings.Join(communitiesFor(p, d.adverts), " ") }
	for p := range d.blocks {
		add(p)
	}
	for _, a := range d.borrowed {
		if a.IsValid() {
			a = a.Unmap()
			add(netip.PrefixFrom(a, a.BitLen()))
		}
	}
	for _, p := range d.services {
		add(p.Masked())
	}
	return s
}
