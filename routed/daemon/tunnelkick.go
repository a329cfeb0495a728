package daemon

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// tunnelKick wakes the tunnel-address loop when what decides the tunnel
// address changes (any pool, or this node's Node record), from the
// daemon's shared datastore feed: no periodic reads while nothing moves.
type tunnelKick struct {
	node string
	ch   chan struct{}
}

func newTunnelKick(node string) *tunnelKick {
	return &tunnelKick{node: node, ch: make(chan struct{}, 1)}
}

var tunnelKinds = []api.Kind{api.KindIPPool, api.KindNode}

func (k *tunnelKick) kick() {
	select {
	case k.ch <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// OnSnapshot implements datastore.Handler.
func (k *tunnelKick) OnSnapshot(datastore.Snapshot) { k.kick() }

// OnEvent implements datastore.Handler.
func (k *tunnelKick) OnEvent(e datastore.Event) {
	if e.Kind == api.KindIPPool || e.Name == k.node {
		k.kick()
	}
}
