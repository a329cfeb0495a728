package datastore

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/routed-net/routed/pkg/api"
)

// Fanout runs one Sync for several consumers (felix and confd in one
// daemon), so each kind is watched once per process, and hands each
// consumer only the kinds it asked for. Add every consumer before Run.
type Fanout struct {
	subs []fanoutSub
	// synced is set once the first snapshot went to every consumer.
	synced atomic.Bool
}

// Synced reports whether the consumers have had a snapshot.
func (f *Fanout) Synced() bool { return f.synced.Load() }

type fanoutSub struct {
	kinds []api.Kind
	h     Handler
}

// Add registers h for kinds.
func (f *Fanout) Add(kinds []api.Kind, h Handler) {
	f.subs = append(f.subs, fanoutSub{kinds: kinds, h: h})
}

// Kinds is the union of every consumer's kinds, in first-asked order.
func (f *Fanout) Kinds() []api.Kind {
	var all []api.Kind
	for _, s := range f.subs {
		for _, k := range s.kinds {
			if !slices.Contains(all, k) {
				all = append(all, k)
			}
		}
	}
	return all
}

// Run syncs the union of the consumers' kinds until ctx ends.
func (f *Fanout) Run(ctx context.Context, c *Client, opts ...SyncOption) error {
	return c.Sync(ctx, f.Kinds(), f, opts...)
}

// OnSnapshot implements Handler: each consumer gets its kinds only.
func (f *Fanout) OnSnapshot(s Snapshot) {
	for _, sub := range f.subs {
		own := Snapshot{Revision: s.Revision, Resources: make(map[api.Kind][]api.Resource, len(sub.kinds))}
		for _, k := range sub.kinds {
			own.Resources[k] = s.Resources[k]
		}
		sub.h.OnSnapshot(own)
	}
	f.synced.Store(true)
}

// OnEvent implements Handler.
func (f *Fanout) OnEvent(e Event) {
	for _, sub := range f.subs {
		if slices.Contains(sub.kinds, e.Kind) {
			sub.h.OnEvent(e)
		}
	}
}
