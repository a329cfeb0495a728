package datastore

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Reasons a Stream gives for a list that came from its cache, or for not
// using the cache it loaded.
const (
	// ListCache: the list came from the stream's cache, brought up to
	// etcd's revision at start by the watch (StreamCache).
	ListCache ListReason = "cache"
	// ListCacheBehind: the cache was further behind etcd than it holds
	// keys: replaying the history would cost more than a list.
	ListCacheBehind ListReason = "cache too far behind"
)

// CachedList is a copy of a stream's list as it stood at Revision.
type CachedList struct {
	// KVs are every key of the listed parts at Revision, sorted by key.
	KVs      []*mvccpb.KeyValue
	Revision int64
	// ClusterID is the etcd cluster the list was read from.
	ClusterID uint64
}

// StreamCache keeps a node-local copy of what a Stream lists, so a
// restarted stream need not list the whole range again. The stream calls
// it from its own goroutine, in order; none of the calls may block on
// I/O.
type StreamCache interface {
	// Load returns the copy saved for this range (prefix, the list's
	// parts and the probe key must be the ones it was saved for), or
	// false (it says why itself).
	Load(prefix string, parts []string, probeKey string) (CachedList, bool)
	// Listed records a list read from etcd (any reason but ListCache).
	Listed(kvs []*mvccpb.KeyValue, rev int64, clusterID uint64)
	// Changed records one watch response, in order after the list (or
	// the loaded copy): events of every key of the prefix; rev is the
	// revision delivered so far.
	Changed(evs []*clientv3.Event, rev int64)
	// Discarded says the loaded copy was not used, and why: the stream
	// lists instead.
	Discarded(reason ListReason)
	// Restored says the loaded copy, brought up to rev, was delivered
	// as the list.
	Restored(rev int64, took time.Duration)
}

// catchUp is a loaded cache being brought up to etcd's revision at start
// by the watch, before anything is delivered: the handler's first list
// is never older than what etcd held when the stream started.
type catchUp struct {
	base    []*mvccpb.KeyValue // the cache, sorted by key
	changes map[string]*clientv3.Event
	from    int64 // the cache's revision
	loaded  time.Time
	// watching is when the watch that catches up was opened (after the
	// resume checks).
	watching time.Time
	// done is closed once delivered or dropped (stops the fast progress
	// requests).
	done chan struct{}
}

// catchUpProgress is how often a stream catching up asks etcd for a
// progress notification: the last write before etcd's revision at start
// may be outside the range, and only a notification then says the watch
// has caught up.
const catchUpProgress = 250 * time.Millisecond

// loadCache sets the stream up to start from its cache: the resume checks
// (cluster, rollback, diverged) then run against the cache's revision
// before the watch, and the watch's compaction check after.
func (s *stream) loadCache() {
	if s.o.Cache == nil {
		return
	}
	cl, ok := s.o.Cache.Load(s.prefix, s.o.ListPrefixes, s.o.ProbeKey)
	if !ok {
		return
	}
	if !sortedByKey(cl.KVs) || cl.Revision <= 0 {
		s.o.Cache.Discarded(ListReason("cache not in key order"))
		return
	}
	s.rev, s.clusterID, s.probeRev = cl.Revision, cl.ClusterID, 0
	for _, kv := range cl.KVs {
		if string(kv.Key) == s.o.ProbeKey {
			s.probeRev = kv.ModRevision
		}
	}
	s.cu = &catchUp{base: cl.KVs, changes: map[string]*clientv3.Event{}, from: cl.Revision,
		loaded: time.Now(), done: make(chan struct{})}
	log.WithFields(map[string]any{"prefix": s.prefix, "revision": cl.Revision, "keys": len(cl.KVs)}).
		Info("starting from the node's cache of the datastore; the watch brings it up to date before it is used")
}

// dropCache gives up on a loaded cache (the stream lists instead).
func (s *stream) dropCache(reason ListReason) {
	if s.cu == nil {
		return
	}
	close(s.cu.done)
	s.cu = nil
	s.o.Cache.Discarded(reason)
	log.WithFields(map[string]any{"prefix": s.prefix, "reason": reason}).Warn("not using the node's cache of the datastore; listing")
}

// cacheTooFar drops the cache when etcd is further ahead of it than it
// holds keys (replaying the history would cost more than a list).
func (s *stream) cacheTooFar() {
	if s.cu != nil && s.rev != 0 && s.etcdRev-s.cu.from > int64(max(len(s.cu.base), 1000)) {
		s.rev, s.reason = 0, ListCacheBehind
	}
}

// inList reports whether key is one a list of the stream reads.
func (s *stream) inList(key []byte) bool {
	if len(s.o.ListPrefixes) == 0 {
		return bytes.HasPrefix(key, []byte(s.prefix))
	}
	for _, p := range s.o.ListPrefixes {
		if bytes.HasPrefix(key, []byte(p)) {
			return true
		}
	}
	return false
}

// catchUpEvents folds one watch response into the loaded cache and
// delivers it as the list once it has reached etcd's revision at start.
func (s *stream) catchUpEvents(evs []*clientv3.Event) {
	for _, ev := range evs {
		if s.inList(ev.Kv.Key) {
			s.cu.changes[string(ev.Kv.Key)] = ev
		}
	}
	s.deliverCacheIfCaughtUp()
}

// deliverCacheIfCaughtUp delivers the loaded cache, with the changes the
// watch brought, as the list at s.rev once s.rev reached etcd's revision
// at start.
func (s *stream) deliverCacheIfCaughtUp() {
	if s.cu == nil || s.rev < s.etcdRev {
		return
	}
	cu := s.cu
	s.cu = nil
	close(cu.done)
	kvs := mergeChanges(cu.base, cu.changes)
	checks, watch := time.Since(cu.loaded), time.Duration(0)
	if !cu.watching.IsZero() {
		checks, watch = cu.watching.Sub(cu.loaded), time.Since(cu.watching)
	}
	log.WithFields(map[string]any{"prefix": s.prefix, "reason": ListCache, "cached": cu.from, "revision": s.rev,
		"changes": len(cu.changes), "keys": len(kvs), "took": time.Since(cu.loaded).Round(time.Millisecond),
		"checks": checks.Round(time.Millisecond), "watch": watch.Round(time.Millisecond)}).
		Info("listed the datastore from the node's cache, brought up to etcd's revision at start")
	s.o.Cache.Restored(s.rev, time.Since(cu.loaded))
	s.h.OnList(kvs, s.rev, ListCache)
}

// mergeChanges returns base (sorted by key) with changes applied, sorted
// by key.
func mergeChanges(base []*mvccpb.KeyValue, changes map[string]*clientv3.Event) []*mvccpb.KeyValue {
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]*mvccpb.KeyValue, 0, len(base)+len(keys))
	i := 0
	for _, k := range keys {
		for i < len(base) && string(base[i].Key) < k {
			out = append(out, base[i])
			i++
		}
		if i < len(base) && string(base[i].Key) == k {
			i++ // replaced or deleted
		}
		if ev := changes[k]; ev.Type == clientv3.EventTypePut {
			out = append(out, ev.Kv)
		}
	}
	return append(out, base[i:]...)
}

// requestCatchUpProgress asks etcd for progress notifications often while
// the stream catches up, until done or ctx ends.
func requestCatchUpProgress(ctx context.Context, request func(), done <-chan struct{}) {
	t := time.NewTicker(catchUpProgress)
	defer t.Stop()
	request()
	for {
		select {
		case <-ctx.Done():
			return
		case <-done:
			return
		case <-t.C:
			request()
		}
	}
}

// sortedByKey reports whether kvs are in strictly increasing key order.
func sortedByKey(kvs []*mvccpb.KeyValue) bool {
	for i := 1; i < len(kvs); i++ {
		if strings.Compare(string(kvs[i-1].Key), string(kvs[i].Key)) >= 0 {
			return false
		}
	}
	return true
}
