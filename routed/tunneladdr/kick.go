package tunneladdr

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
)

var log = logrus.WithField("component", "tunneladdr")

// writeRetries bounds read-modify-write loops that lose to other writers.
const writeRetries = 10

// Kinds are what decides the tunnel addresses: any pool, this Node.
var Kinds = []api.Kind{api.KindIPPool, api.KindNode}

// recheck bounds how long a tunnel address missed through a lost event
// could stay wrong.
const recheck = 10 * time.Minute

// Loop keeps this node's tunnel addresses in line with the pools: it
// runs EnsureTunnelAddress when the node feed says a pool or this Node
// changed, retries failures with backoff, and otherwise re-checks only
// every ten minutes: no periodic reads while nothing moves.
type Loop struct {
	ds   *datastore.Client
	ic   *ipam.Client
	node string
	held func() bool // true: write nothing (the datastore is not trusted)
	kick chan struct{}
}

// New returns the Loop of node; held reports when to write nothing.
func New(ds *datastore.Client, ic *ipam.Client, node string, held func() bool) *Loop {
	return &Loop{ds: ds, ic: ic, node: node, held: held, kick: make(chan struct{}, 1)}
}

func (l *Loop) wake() {
	select {
	case l.kick <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// OnBatch implements feed.Consumer.
func (l *Loop) OnBatch(b feed.Batch) {
	if b.Snapshot {
		l.wake()
		return
	}
	for _, u := range b.Updates {
		if u.Kind == api.KindIPPool || u.Name == l.node {
			l.wake()
			return
		}
	}
}

// Run keeps the addresses until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	retry := backoff.New(time.Second, 30*time.Second)
	for {
		wait := recheck
		if l.held() {
			wait = 3 * time.Second // write nothing into an untrusted datastore
		} else if err := EnsureTunnelAddress(ctx, l.ds, l.ic, l.node); err != nil && ctx.Err() == nil {
			log.WithError(err).Warn("tunnel address not settled; will retry")
			wait = retry.Next()
		} else {
			retry.Reset()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-time.After(wait):
		}
	}
}
