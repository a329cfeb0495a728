package bgp

import (
	"net/netip"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix"
)

// feeder turns GoBGP best-path events into RouteSink calls. GoBGP runs
// the callback of one watch on one goroutine, in order, so that
// goroutine alone owns installed.
type feeder struct {
	sink felix.RouteSink
	log  *logrus.Entry
	// installed is what the sink was told: prefix -> next hop.
	installed map[netip.Prefix]netip.Addr
}

func newFeeder(sink felix.RouteSink, log *logrus.Entry) *feeder {
	return &feeder{sink: sink, log: log, installed: map[netip.Prefix]netip.Addr{}}
}

// onEvent handles one batch of best-path changes.
func (f *feeder) onEvent(ev *api.WatchEventResponse) {
	t := ev.GetTable()
	if t == nil {
		return
	}
	for _, p := range t.Paths {
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
	if had && old == pi.nextHop {
		return // the best path changed, not where it leads
	}
	f.installed[pi.prefix] = pi.nextHop
	f.sink.RouteUpdate(pi.prefix, pi.nextHop)
	if f.log.Logger.IsLevelEnabled(logrus.DebugLevel) {
		f.log.WithFields(logrus.Fields{"prefix": pi.prefix, "nextHop": pi.nextHop, "from": pi.neighbor}).Debug("learned route")
	}
}
