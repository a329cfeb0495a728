package noderecord

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

// Keeper re-creates this node's Node record when it is deleted while
// routed runs (an operator's mistake, a wiped key): without it, the
// cluster GC would eventually reclaim a live node's endpoints and
// addresses. It restores the record as last seen (labels, AS number,
// route-reflector settings, tunnel address) with the current address.
type Keeper struct {
	name string
	addr Addresses
	lost chan struct{}

	mu   sync.Mutex
	last *api.Node
}

// NewKeeper returns the Keeper of node name, registered with addr.
// Subscribe it to the node feed for Kinds, then Run it.
func NewKeeper(name string, addr Addresses) *Keeper {
	return &Keeper{name: name, addr: addr, lost: make(chan struct{}, 1)}
}

// Kinds are what the Keeper takes from the node feed.
var Kinds = []api.Kind{api.KindNode}

func (k *Keeper) signal() {
	select {
	case k.lost <- struct{}{}:
	default:
	}
}

func (k *Keeper) remember(n *api.Node) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.last = n
}

// OnBatch implements feed.Consumer.
func (k *Keeper) OnBatch(b feed.Batch) {
	seen := false
	for _, u := range b.Updates {
		if u.Kind != api.KindNode || u.Name != k.name {
			continue
		}
		seen = true
		if u.Deleted {
			k.signal()
		} else {
			k.remember(u.Resource.(*api.Node))
		}
	}
	if b.Snapshot && !seen {
		k.signal()
	}
}

// Run re-creates the record each time it goes, until ctx ends.
func (k *Keeper) Run(ctx context.Context, ds *datastore.Client) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-k.lost:
		}
		_ = backoff.Retry(ctx, 200*time.Millisecond, 10*time.Second, nil, func() error {
			err := k.restore(ctx, ds)
			if err != nil {
				log.WithError(err).Warn("cannot re-create this node's Node record yet; retrying")
			}
			return err
		})
	}
}

func (k *Keeper) restore(ctx context.Context, ds *datastore.Client) error {
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
