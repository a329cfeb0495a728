package ipam

import (
	"context"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// AffinityHandler receives block affinities: a full snapshot first, then
// every change. After a resync (compaction, lost watch, etcd outage) a new
// snapshot replaces everything received before. Calls come from one
// goroutine, in datastore order.
type AffinityHandler interface {
	OnAffinitySnapshot(all []Affinity)
	// OnAffinityUpdate reports a created or changed affinity, or with
	// deleted set a removed one (its State is then empty).
	OnAffinityUpdate(a Affinity, deleted bool)
}

// WatchAffinities streams every node's block affinities to h until ctx
// ends, and returns ctx's error. Consumers that route blocks (felix, the
// BGP speaker) should act only on confirmed affinities.
func WatchAffinities(ctx context.Context, ds *datastore.Client, h AffinityHandler) error {
	return ds.WatchPrefix(ctx, affinityPrefix, &affinityWatcher{h: h})
}

type affinityWatcher struct{ h AffinityHandler }

// OnRawSnapshot implements datastore.RawHandler.
func (w *affinityWatcher) OnRawSnapshot(kvs []*mvccpb.KeyValue, _ int64) {
	all := make([]Affinity, 0, len(kvs))
	for _, kv := range kvs {
		a, err := parseAffinityKV(string(kv.Key), kv.Value, kv.ModRevision)
		if err != nil {
			log.WithError(err).Warn("skipping unreadable affinity")
			continue
		}
		all = append(all, Affinity{Node: a.node, CIDR: a.cidr, State: a.rec.State})
	}
	slices.SortFunc(all, func(x, y Affinity) int {
		if x.Node != y.Node {
			if x.Node < y.Node {
				return -1
			}
			return 1
		}
		return x.CIDR.Addr().Compare(y.CIDR.Addr())
	})
	w.h.OnAffinitySnapshot(all)
}

// OnRawEvent implements datastore.RawHandler.
func (w *affinityWatcher) OnRawEvent(ev *clientv3.Event) {
	key := string(ev.Kv.Key)
	if ev.Type == clientv3.EventTypeDelete {
		node, cidr, err := parseAffinityKey(key)
		if err != nil {
			log.WithError(err).Warn("skipping unreadable affinity key")
			return
		}
		w.h.OnAffinityUpdate(Affinity{Node: node, CIDR: cidr}, true)
		return
	}
	a, err := parseAffinityKV(key, ev.Kv.Value, ev.Kv.ModRevision)
	if err != nil {
		log.WithError(err).Warn("skipping unreadable affinity")
		return
	}
	w.h.OnAffinityUpdate(Affinity{Node: a.node, CIDR: a.cidr, State: a.rec.State}, false)
}
