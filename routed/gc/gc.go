// Package gc reclaims what the cluster no longer uses: every node releases
// its own empty blocks; one process, elected through etcd, removes
// endpoints of deleted nodes and frees leaked addresses cluster-wide,
// every write fenced by its election. The candidates are the nodes, or
// (Calico's kube-controllers' way) a process of its own, `routed
// cluster-gc`, with the nodes run with --cluster-gc=false: the pass
// reads every block of the cluster, and its memory then stays off the
// nodes.
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
	DS   *datastore.Client
	IPAM *ipam.Client
	// Node, when set, is the node whose empty blocks are released (the
	// node daemon); empty in a process of its own.
	Node string
	// Cluster makes this process a candidate for the cluster-wide
	// pass's election, as Name.
	Cluster bool
	Name    string
	Period  time.Duration // how often both passes run
	Grace   time.Duration // how long something must be unused or gone
	// Held reports when the datastore is not trusted: nothing is
	// written then.
	Held func() bool
	// Leading is set while this process is the elected cluster GC
	// process.
	Leading *atomic.Bool
	// Metrics, when set, get each cluster-wide pass's findings.
	Metrics *Metrics
}

// Run runs the passes Config asks for every Period until ctx ends, and
// returns once the cluster-wide pass (when this process leads) has
// stopped too.
func Run(ctx context.Context, c Config) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.Cluster {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runCluster(ctx, c)
		}()
	}
	if c.Node == "" {
		<-ctx.Done()
		return nil
	}
	every(ctx, c.Period, func() {
		// The node's own pass, like the cluster-wide one, writes only
		// while the identity it judged trusted at the start stays.
		identity, ok := trustedIdentity(ctx, c.DS, c.Held)
		if !ok {
			return
		}
		fctx := ipam.WithCallFence(ctx, datastore.Fence{Identity: identity})
		if _, err := c.IPAM.ReleaseEmptyBlocks(fctx, c.Node); err != nil {
			log.WithError(err).Warn("releasing empty blocks failed")
		}
	})
	return nil
}

// runCluster runs for the election and, while elected, the cluster-wide
// pass every Period.
func runCluster(ctx context.Context, c Config) {
	runAsLeader(ctx, c.DS, gcElection, c.Name, func(ctx context.Context, fence datastore.Fence) {
		c.Leading.Store(true)
		defer c.Leading.Store(false)
		defer c.Metrics.observe(nil)
		every(ctx, c.Period, func() {
			if identity, ok := trustedIdentity(ctx, c.DS, c.Held); ok {
				fence := fence
				fence.Identity = identity
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
}

// trustedIdentity is the cluster identity record's ModRevision when held
// judges the datastore trusted and the record did not change around that
// judgement (read before and after it): the pass's writes are fenced on
// it, so a datastore marked not ready, restored or reinitialised during
// the pass refuses the rest of them.
func trustedIdentity(ctx context.Context, ds *datastore.Client, held func() bool) (int64, bool) {
	before, err := ds.GetClusterInfo(ctx, 0)
	if held() || err != nil {
		return 0, false
	}
	after, err := ds.GetClusterInfo(ctx, 0)
	if err != nil || after.ModRevision != before.ModRevision || !after.DatastoreReady {
		log.WithError(err).Debug("GC: the cluster identity could not be read or changed while it was judged; the pass waits for the next period")
		return 0, false
	}
	return after.ModRevision, true
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
