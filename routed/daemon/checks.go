package daemon

import (
	"context"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/bgp"
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
// request. fx is nil on a dedicated route reflector.
func addHealthChecks(h *Health, ds *datastore.Client, feed *datastore.Fanout, sp *bgp.Speaker, fx *felix.Felix, beats loopBeats) {
	h.AddReadiness("datastore", func(context.Context) (bool, string) {
		switch {
		case !ds.Connected():
			return false, "not connected to etcd"
		case !feed.Synced():
			return false, "datastore not read yet"
		}
		return true, ""
	})
	h.AddReadiness("bgp", sp.Readiness)
	h.AddLiveness("bgp loop", HeartbeatCheck(beats.bgp, loopStallLimit))
	h.AddLiveness("datastore watch", HeartbeatCheck(beats.datastore, watchStallLimit))
	if fx != nil {
		h.AddReadiness("felix", func(context.Context) (bool, string) {
			if !fx.Applied() {
				return false, "dataplane not programmed yet"
			}
			return true, ""
		})
		h.AddLiveness("felix loop", HeartbeatCheck(beats.felix, loopStallLimit))
	}
}
