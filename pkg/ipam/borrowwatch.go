package ipam

import (
	"context"
	"maps"
	"net/netip"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// BorrowHandler receives, per block, the addresses allocated to nodes
// other than the block's own (borrowed /32s) and the node holding each:
// a full snapshot first, then each block whose borrowed set may have
// changed. After a resync a new snapshot replaces everything. Calls come
// from one goroutine, in datastore order.
type BorrowHandler interface {
	OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string)
	// OnBorrowedBlock replaces the borrowed addresses of one block; an
	// empty map (block deleted or nothing borrowed) clears it.
	OnBorrowedBlock(block netip.Prefix, borrowed map[netip.Addr]string)
}

// WatchBorrowed streams every block's borrowed addresses to h until ctx
// ends, from the block events themselves: no periodic scan. It returns
// ctx's error.
func WatchBorrowed(ctx context.Context, ds *datastore.Client, h BorrowHandler) error {
	return ds.WatchPrefix(ctx, blockPrefix, &borrowWatcher{h: h, last: map[netip.Prefix]map[netip.Addr]string{}})
}

// borrowWatcher remembers what it last reported per block, so a block
// write that changed no borrowed address (most writes) reaches nobody.
type borrowWatcher struct {
	h    BorrowHandler
	last map[netip.Prefix]map[netip.Addr]string
}

// borrowedIn lists the block's allocations held for other nodes.
func borrowedIn(b *block) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	owner := b.owner()
	for o := range b.Allocations {
		if h := b.holder(o); h != nil && h.Node != "" && h.Node != owner {
			out[b.addr(o)] = h.Node
		}
	}
	return out
}

// OnRawSnapshot implements datastore.RawHandler.
func (w *borrowWatcher) OnRawSnapshot(kvs []*mvccpb.KeyValue, _ int64) {
	w.last = map[netip.Prefix]map[netip.Addr]string{}
	for _, kv := range kvs {
		b, err := decodeBlock(kv.Value)
		if err != nil {
			log.WithError(err).WithField("key", string(kv.Key)).Warn("skipping unreadable block")
			continue
		}
		if br := borrowedIn(b); len(br) > 0 {
			w.last[b.prefix] = br
		}
	}
	all := make(map[netip.Prefix]map[netip.Addr]string, len(w.last))
	for p, br := range w.last {
		all[p] = maps.Clone(br)
	}
	w.h.OnBorrowedSnapshot(all)
}

// OnRawEvent implements datastore.RawHandler.
func (w *borrowWatcher) OnRawEvent(ev *clientv3.Event) {
	p, err := parseBlockKey(string(ev.Kv.Key))
	if err != nil {
		log.WithError(err).Warn("skipping unreadable block key")
		return
	}
	br := map[netip.Addr]string{}
	if ev.Type != clientv3.EventTypeDelete {
		b, err := decodeBlock(ev.Kv.Value)
		if err != nil {
			log.WithError(err).WithField("key", string(ev.Kv.Key)).Warn("skipping unreadable block")
			return
		}
		br = borrowedIn(b)
	}
	if maps.Equal(br, w.last[p]) || (len(br) == 0 && len(w.last[p]) == 0) {
		return
	}
	if len(br) == 0 {
		delete(w.last, p)
	} else {
		w.last[p] = br
	}
	w.h.OnBorrowedBlock(p, maps.Clone(br))
}
