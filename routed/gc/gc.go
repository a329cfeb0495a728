// Package gc reclaims what the cluster no longer uses: every node releases
// its own empty blocks; one node, elected through etcd, removes endpoints
// of deleted nodes and frees leaked addresses cluster-wide, every write
// fenced by its election.
package gc

import (
	"context"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

var log = logrus.WithField("component", "gc")

// Config says what a node's GC does.
type Config struct {
	DS     *datastore.Client
	IPAM   *ipam.Client
	Node   string
	Period time.Duration // how often both passes run
	Grace  time.Duration // how long something must be unused or gone
	// Held reports when the datastore is not trusted: nothing is
	// written then.
	Held func() bool
	// Leading is set while this node is the elected cluster GC node.
	Leading *atomic.Bool
	// Metrics, when set, get each cluster-wide pass's findings.
	Metrics *Metrics
}

// Run runs both passes every Period until ctx ends, and returns once the
// cluster-wide pass (when this node leads) has stopped too.
func Run(ctx context.Context, c Config) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Add(1)
	go func() {
		defer wg.Done()
		runAsLeader(ctx, c.DS, gcElection, c.Node, func(ctx context.Context, fence datastore.Fence) {
			c.Leading.Store(true)
			defer c.Leading.Store(false)
			defer c.Metrics.observe(nil)
			every(ctx, c.Period, func() {
				if !c.Held() {
					if rep := clusterGC(ctx, c.DS, fence, c.Grace); rep != nil {
						c.Metrics.observe(rep)
					}
					// What the pass read is garbage now: hand it back
					// to the kernel at once, not over the scavenger's
					// minutes, so the elected node's anonymous memory
					// does not stay at the pass's peak (one collection
					// a period, on one node).
					debug.FreeOSMemory()
				}
			})
		})
	}()
	every(ctx, c.Period, func() {
		if c.Held() {
			return
		}
		if _, err := c.IPAM.ReleaseEmptyBlocks(ctx, c.Node); err != nil {
			log.WithError(err).Warn("releasing empty blocks failed")
		}
	})
	return nil
}

// every runs f each period until ctx ends.
func every(ctx context.Context, period time.Duration, f func()) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
