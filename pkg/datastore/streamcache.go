package datastore

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"slices"
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

// ListCacheUnreadable: the cache read whole when loaded, not when it was
// read again to be delivered; the stream lists instead.
const ListCacheUnreadable ListReason = "cache unreadable"

// CachedList is a copy of a stream's list as it stood at Revision, kept
// where it is (a file) until it is delivered: a stream catching up
// holds none of its keys.
type CachedList struct {
	Revision int64
	// ClusterID is the etcd cluster the list was read from.
	ClusterID uint64
	// Keys is how many keys the copy holds.
	Keys int
	// ProbeRev is the ModRevision of the stream's probe key in the copy
	// (0: absent).
	ProbeRev int64
	// Read yields every key of the copy, in strictly increasing key
	// order, read again from where it is kept; the keys are the
	// caller's. When the copy no longer reads whole and intact it
	// yields the error last.
	Read iter.Seq2[*mvccpb.KeyValue, error]
	// Close releases the copy; called once, after Read or instead.
	Close func()
}

// StreamCache keeps a node-local copy of what a Stream lists, so a
// restarted stream need not list the whole range again. The stream calls
// it from its own goroutine, in order. Only the list's calls (ListPage)
// may do I/O: the stream is waiting on etcd's pages then anyway; the
// watch's (Changed) must not block.
type StreamCache interface {
	// Load returns the copy saved for this range (prefix, the list's
	// parts and the probe key must be the ones it was saved for), or
	// false (it says why itself).
	Load(prefix string, parts []string, probeKey string) (CachedList, bool)
	// ListStarted says a list from etcd (any reason but ListCache) at
	// rev begins: its keys follow through ListPage, then Listed. A list
	// that fails part way is followed by another ListStarted, or by
	// nothing.
	ListStarted(rev int64, clusterID uint64)
	// ListPage records the list's next keys, in order; kvs stay the
	// stream's (the cache copies what it keeps).
	ListPage(kvs []*mvccpb.KeyValue)
	// Listed says the list begun at rev was read whole.
	Listed(rev int64, clusterID uint64)
	// Changed records one watch response, in order after the list (or
	// the loaded copy): events of every key of the prefix; rev is the
	// revision delivered so far.
	Changed(evs []*clientv3.Event, rev int64)
	// Discarded says the loaded copy was not used, and why: the stream
	// lists instead.
	Discarded(reason ListReason)
	// HistoryLost says the running stream found the history it followed
	// gone from etcd (another cluster, a rollback, a diverged history):
	// nothing the cache holds of it may be written again. A list
	// follows. (A loaded copy not delivered yet is Discarded instead.)
	HistoryLost(reason ListReason)
	// Restored says the loaded copy, brought up to rev, was delivered
	// as the list.
	Restored(rev int64, took time.Duration)
}

// catchUp is a loaded cache being brought up to etcd's revision at start
// by the watch, before anything is delivered: the handler's first list
// is never older than what etcd held when the stream started.
type catchUp struct {
	list    CachedList
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
	if cl.Revision <= 0 || cl.Read == nil {
		if cl.Close != nil {
			cl.Close()
		}
		s.o.Cache.Discarded(ListReason("cache without revision or keys"))
		return
	}
	s.rev, s.clusterID, s.probeRev = cl.Revision, cl.ClusterID, cl.ProbeRev
	s.cu = &catchUp{list: cl, changes: map[string]*clientv3.Event{}, from: cl.Revision,
		loaded: time.Now(), done: make(chan struct{})}
	log.WithFields(map[string]any{"prefix": s.prefix, "revision": cl.Revision, "keys": cl.Keys}).
		Info("starting from the node's cache of the datastore; the watch brings it up to date before it is used")
}

// dropCache gives up on a loaded cache (the stream lists instead).
func (s *stream) dropCache(reason ListReason) {
	if s.cu == nil {
		return
	}
	s.cu.close()
	s.cu = nil
	s.o.Cache.Discarded(reason)
	log.WithFields(map[string]any{"prefix": s.prefix, "reason": reason}).Warn("not using the node's cache of the datastore; listing")
}

// cacheTooFar drops the cache when etcd is further ahead of it than it
// holds keys (replaying the history would cost more than a list).
func (s *stream) cacheTooFar() {
	if s.cu != nil && s.rev != 0 && s.etcdRev-s.cu.from > int64(max(s.cu.list.Keys, 1000)) {
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

// close releases the loaded copy and stops the fast progress requests.
func (cu *catchUp) close() {
	close(cu.done)
	if cu.list.Close != nil {
		cu.list.Close()
	}
}

// catchUpEvents folds one watch response into the loaded cache and
// delivers it as the list once it has reached etcd's revision at start.
func (s *stream) catchUpEvents(evs []*clientv3.Event) error {
	for _, ev := range evs {
		if s.inList(ev.Kv.Key) {
			s.cu.changes[string(ev.Kv.Key)] = ev
		}
	}
	return s.deliverCacheIfCaughtUp()
}

// errCacheUnreadable ends a watch whose loaded cache did not read whole
// when delivered: the stream lists at once.
const errCacheUnreadable = watchError("datastore: the node's cache did not read again whole")

// deliverCacheIfCaughtUp delivers the loaded cache, with the changes the
// watch brought, as the list at s.rev once s.rev reached etcd's revision
// at start. The copy is read as it is delivered (a ListStreamer takes
// it key by key). When it no longer reads whole, nothing of it counts:
// the stream lists instead (errCacheUnreadable).
func (s *stream) deliverCacheIfCaughtUp() error {
	if s.cu == nil || s.rev < s.etcdRev {
		return nil
	}
	cu := s.cu
	s.cu = nil
	defer cu.close()
	var failed error
	keys, read := 0, false
	seq := func(yield func(*mvccpb.KeyValue, error) bool) {
		for kv, err := range mergeChanges(cu.list.Read, cu.changes) {
			if err != nil {
				failed = err
				yield(nil, err)
				return
			}
			keys++
			if !yield(kv, nil) {
				return
			}
		}
		read = true // the cache hears it before the handler acts on it
		s.o.Cache.Restored(s.rev, time.Since(cu.loaded))
	}
	s.deliverList(seq, s.rev, ListCache)
	if failed != nil || !read {
		log.WithError(failed).WithField("prefix", s.prefix).Warn("the node's cache of the datastore did not read whole when delivered; listing")
		s.o.Cache.Discarded(ListCacheUnreadable)
		s.rev, s.reason = 0, ListCacheUnreadable
		return errCacheUnreadable
	}
	checks, watch := time.Since(cu.loaded), time.Duration(0)
	if !cu.watching.IsZero() {
		checks, watch = cu.watching.Sub(cu.loaded), time.Since(cu.watching)
	}
	log.WithFields(map[string]any{"prefix": s.prefix, "reason": ListCache, "cached": cu.from, "revision": s.rev,
		"changes": len(cu.changes), "keys": keys, "took": time.Since(cu.loaded).Round(time.Millisecond),
		"checks": checks.Round(time.Millisecond), "watch": watch.Round(time.Millisecond)}).
		Info("listed the datastore from the node's cache, brought up to etcd's revision at start")
	return nil
}

// mergeChanges yields base (in strictly increasing key order) with
// changes applied, in key order; a base out of order, or one that fails
// to read, yields an error last.
func mergeChanges(base iter.Seq2[*mvccpb.KeyValue, error], changes map[string]*clientv3.Event) iter.Seq2[*mvccpb.KeyValue, error] {
	keys := make([]string, 0, len(changes))
	for k := range changes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return func(yield func(*mvccpb.KeyValue, error) bool) {
		i := 0
		var last []byte
		// change yields keys[i] when it is a put, and moves on.
		change := func() bool {
			ev := changes[keys[i]]
			i++
			return ev.Type != clientv3.EventTypePut || yield(ev.Kv, nil)
		}
		for kv, err := range base {
			if err != nil {
				yield(nil, err)
				return
			}
			if last != nil && bytes.Compare(kv.Key, last) <= 0 {
				yield(nil, fmt.Errorf("datastore: the cache's key %q comes after %q: not in key order", kv.Key, last))
				return
			}
			last = kv.Key
			for i < len(keys) && keys[i] < string(kv.Key) {
				if !change() {
					return
				}
			}
			if i < len(keys) && keys[i] == string(kv.Key) {
				if !change() { // replaced or deleted
					return
				}
				continue
			}
			if !yield(kv, nil) {
				return
			}
		}
		for i < len(keys) {
			if !change() {
				return
			}
		}
	}
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
