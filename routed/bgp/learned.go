package bgp

import (
	"net/netip"
	"sync"
	"time"

	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/sirupsen/logrus"
)

// RouteSink is how the speaker hands over the best paths it learned (felix
// on a node). Calls come from one goroutine at a time; implementations
// must be safe for concurrent use and must not block for long. The sink
// decides what reaches the kernel: it is told the peer each path came
// from so it can tell cluster sessions from external peers.
type RouteSink interface {
	// RouteUpdate adds or replaces the best path for prefix. priority
	// is its route priority (api.PriorityFromLocalPref of its
	// LOCAL_PREF, as import filters left it): the kernel metric it
	// should have, api.DefaultRoutePriority for most routes.
	RouteUpdate(prefix netip.Prefix, nextHop, peer netip.Addr, priority uint32)
	// RouteWithdraw removes prefix; unknown prefixes are ignored.
	RouteWithdraw(prefix netip.Prefix)
}

// RouteStatus lets status output say what became of a learned route.
type RouteStatus interface {
	// Programmed reports whether the route is in the kernel as wanted.
	Programmed(prefix netip.Prefix) bool
	// Filtered says why the route is kept out of the kernel ("" if not).
	Filtered(prefix netip.Prefix) string
}

// feeder turns GoBGP best-path events into RouteSink calls. GoBGP runs
// the callback of one watch on one goroutine, in order; across a BGP
// restart the old server's watch may still deliver while the new one's
// starts, so mu serialises them.
type feeder struct {
	sink RouteSink
	log  *logrus.Entry
	mu   sync.Mutex
	// installed is what the sink was told, per prefix.
	installed map[netip.Prefix]hop
}

// hop is where a learned best path leads, who said so, and at which
// priority.
type hop struct {
	nextHop, peer netip.Addr
	priority      uint32
}

func newFeeder(sink RouteSink, log *logrus.Entry) *feeder {
	return &feeder{sink: sink, log: log, installed: map[netip.Prefix]hop{}}
}

// onBest handles one batch of best-path changes.
func (f *feeder) onBest(paths []*apiutil.Path, _ time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range paths {
		pi, err := parsePath(p)
		if err != nil {
			continue // other families, End-of-RIB markers
		}
		f.bestChanged(pi)
	}
}

// bestChanged applies the new best path of one prefix. A withdrawn best
// path, or a best path this node originates itself, removes the learned
// route; anything else adds or replaces it.
func (f *feeder) bestChanged(pi pathInfo) {
	old, had := f.installed[pi.prefix]
	if pi.withdraw || !pi.neighbor.IsValid() || !pi.nextHop.IsValid() {
		if had {
			delete(f.installed, pi.prefix)
			f.sink.RouteWithdraw(pi.prefix)
			if f.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
				f.log.WithField("prefix", pi.prefix).Debug("learned route withdrawn")
			}
		}
		return
	}
	h := hop{pi.nextHop, pi.neighbor, pi.priority}
	if had && old == h {
		return // the best path changed, not where it leads
	}
	f.installed[pi.prefix] = h
	f.sink.RouteUpdate(pi.prefix, pi.nextHop, pi.neighbor, pi.priority)
	if f.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		f.log.WithFields(logrus.Fields{"prefix": pi.prefix, "nextHop": pi.nextHop, "from": pi.neighbor, "priority": pi.priority}).Debug("learned route")
	}
}
