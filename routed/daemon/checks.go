package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/routed/health"
)

// loopBeats are the heartbeats of the loops liveness watches.
type loopBeats struct {
	felix, bgp, datastore *heartbeat.Beat
}

// How long each loop may go without a beat before routed is not live.
// The loops beat at least every heartbeat.Interval; the datastore watch
// answers a progress request every 30 s.
const (
	loopStallLimit  = 60 * time.Second
	watchStallLimit = 100 * time.Second
)

// addHealthChecks registers what /readiness and /liveness ask, on
// request.
func (n *node) addHealthChecks() {
	h := n.health
	h.AddReadiness("datastore", func(context.Context) (bool, string) {
		switch {
		case !n.ds.Connected():
			return false, "not connected to etcd"
		case !n.feed.Synced():
			return false, "datastore not read yet"
		}
		return true, ""
	})
	h.AddReadiness("datastore identity", func(context.Context) (bool, string) {
		if frozen, why := n.guard.Frozen(); frozen {
			return false, "holding the dataplane and BGP as they are: " + why
		}
		return true, ""
	})
	h.AddReadiness("bgp", n.speaker.Readiness)
	h.AddLiveness("bgp loop", health.HeartbeatCheck(n.beats.bgp, loopStallLimit))
	h.AddLiveness("datastore watch", health.HeartbeatCheck(n.beats.datastore, watchStallLimit))
	h.AddLiveness("datastore consumers", func(context.Context) (bool, string) {
		if name, d := n.feed.Stalled(time.Now(), loopStallLimit); name != "" {
			return false, fmt.Sprintf("%s has been taking one update for %s", name, d.Round(time.Second))
		}
		return true, ""
	})
	if fx := n.felix; fx != nil {
		h.AddReadiness("felix", func(context.Context) (bool, string) {
			if !fx.Applied() {
				return false, "dataplane not programmed yet"
			}
			return true, ""
		})
		h.AddLiveness("felix loop", health.HeartbeatCheck(n.beats.felix, loopStallLimit))
	}
}
