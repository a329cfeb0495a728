package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// nodeKeeper re-creates this node's Node record when it is deleted while
// routed runs (an operator's mistake, a wiped key): without it, the
// cluster GC would eventually reclaim a live node's endpoints and
// addresses. It restores the record as last seen (labels, AS number,
// route-reflector settings, tunnel address) with the current address.
type nodeKeeper struct {
	name string
	addr Addresses
	lost chan struct{}

	mu   sync.Mutex
	last *api.Node
}

func newNodeKeeper(name string, addr Addresses) *nodeKeeper {
	return &nodeKeeper{name: name, addr: addr, lost: make(chan struct{}, 1)}
}

var nodeKeeperKinds = []api.Kind{api.KindNode}

func (k *nodeKeeper) signal() {
	select {
	case k.lost <- struct{}{}:
	default:
	}
}

func (k *nodeKeeper) remember(n *api.Node) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last = n
}

// OnSnapshot implements datastore.Handler.
func (k *nodeKeeper) OnSnapshot(s datastore.Snapshot) {
	for _, r := range s.Resources[api.KindNode] {
		if r.Meta().Name == k.name {
			k.remember(r.(*api.Node))
			return
		}
	}
	k.signal()
}

// OnEvent implements datastore.Handler.
func (k *nodeKeeper) OnEvent(e datastore.Event) {
	if e.Kind != api.KindNode || e.Name != k.name {
		return
	}
	if e.Type == datastore.EventDelete {
		k.signal()
		return
	}
	k.remember(e.Resource.(*api.Node))
}

// run re-creates the record each time it goes, until ctx ends.
func (k *nodeKeeper) run(ctx context.Context, ds *datastore.Client) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.lost:
		}
		backoff := 200 * time.Millisecond
		for {
			err := k.restore(ctx, ds)
			if err == nil || ctx.Err() != nil {
				break
			}
			log.WithError(err).Warn("cannot re-create this node's Node record yet; retrying")
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
		}
	}
}

func (k *nodeKeeper) restore(ctx context.Context, ds *datastore.Client) error {
	k.mu.Lock()
	last := k.last
	k.mu.Unlock()
	n := &api.Node{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNode}}
	if last != nil {
		c := *last
		n.Metadata.Labels, n.Metadata.Annotations, n.Spec = c.Metadata.Labels, c.Metadata.Annotations, c.Spec
	}
	n.Metadata.Name = k.name
	if n.Spec.BGP == nil {
		n.Spec.BGP = &api.NodeBGPSpec{}
	}
	k.addr.set(n.Spec.BGP)
	_, err := ds.Create(ctx, n)
	switch {
	case errors.Is(err, datastore.ErrExists):
		return nil // someone re-created it first
	case err != nil:
		return err
	}
	log.Warn("this node's Node record was deleted while routed runs; re-created it as it was (delete a node only after stopping its routed)")
	return nil
}
