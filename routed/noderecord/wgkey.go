package noderecord

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

// KeyPublisher keeps this node's WireGuard public keys on its Node
// (status.wireguardPublicKey and wireguardPublicKeyV6, Calico's fields).
// felix hands it the keys it programs (Publish); the node feed shows the
// Node as stored (OnBatch); Run writes whenever the two differ, so a
// key that an operator's apply or a re-created record lost comes back.
// It writes nothing while the datastore is held.
type KeyPublisher struct {
	name string
	held func() bool
	wake chan struct{}

	mu     sync.Mutex
	want   [2]string
	hasKey bool // Publish was called
	stored [2]string
	seen   bool // the feed showed this node's Node
}

// NewKeyPublisher returns the publisher of node name's keys; held (may
// be nil) reports whether the datastore is untrusted. Subscribe it to
// the node feed for Kinds, then Run it.
func NewKeyPublisher(name string, held func() bool) *KeyPublisher {
	if held == nil {
		held = func() bool { return false }
	}
	return &KeyPublisher{name: name, held: held, wake: make(chan struct{}, 1)}
}

func (p *KeyPublisher) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Publish records the keys to publish ("" for a family that is off).
// It never blocks (felix's loop calls it).
func (p *KeyPublisher) Publish(v4, v6 string) {
	p.mu.Lock()
	p.want, p.hasKey = [2]string{v4, v6}, true
	p.mu.Unlock()
	p.signal()
}

// OnBatch implements feed.Consumer.
func (p *KeyPublisher) OnBatch(b feed.Batch) {
	changed := false
	p.mu.Lock()
	for _, u := range b.Updates {
		if u.Kind != api.KindNode || u.Name != p.name {
			continue
		}
		changed = true
		if u.Deleted {
			p.stored, p.seen = [2]string{}, false
			continue
		}
		n := u.Resource.(*api.Node)
		p.stored, p.seen = [2]string{n.Status.WireguardPublicKey, n.Status.WireguardPublicKeyV6}, true
	}
	p.mu.Unlock()
	if changed || b.Snapshot {
		p.signal()
	}
}

// due reports whether a write is needed: felix has keys, the Node is
// there and holds others.
func (p *KeyPublisher) due() (want [2]string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.want, p.hasKey && p.seen && p.stored != p.want
}

// Run writes the keys each time they differ from the stored ones, until
// ctx ends.
func (p *KeyPublisher) Run(ctx context.Context, ds *datastore.Client) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
		}
		if _, ok := p.due(); !ok || p.held() {
			continue // the feed's next snapshot after a hold wakes us
		}
		_ = backoff.Retry(ctx, 200*time.Millisecond, 10*time.Second, nil, func() error {
			want, ok := p.due()
			if !ok || p.held() {
				return nil
			}
			err := p.write(ctx, ds, want)
			if err != nil {
				log.WithError(err).Warn("cannot publish this node's WireGuard keys yet; retrying")
			}
			return err
		})
	}
}

func (p *KeyPublisher) write(ctx context.Context, ds *datastore.Client, keys [2]string) error {
	for i := 0; i < writeRetries; i++ {
		r, err := ds.Get(ctx, api.KindNode, p.name)
		if datastore.IsNotFound(err) {
			return nil // the keeper re-creates it; the feed then wakes us
		}
		if err != nil {
			return fmt.Errorf("wireguard keys: reading node %q: %w", p.name, err)
		}
		n := r.(*api.Node)
		if n.Status.WireguardPublicKey == keys[0] && n.Status.WireguardPublicKeyV6 == keys[1] {
			return nil
		}
		n.Status.WireguardPublicKey, n.Status.WireguardPublicKeyV6 = keys[0], keys[1]
		_, err = ds.Update(ctx, n)
		if errors.Is(err, datastore.ErrConflict) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wireguard keys: writing node %q: %w", p.name, err)
		}
		log.WithField("publicKey", keys[0]).WithField("publicKeyV6", keys[1]).Info("published this node's WireGuard keys")
		return nil
	}
	return fmt.Errorf("wireguard keys: node %q: %d conflicting writes in a row", p.name, writeRetries)
}
