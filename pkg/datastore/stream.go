package datastore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/internal/heartbeat"
)

// StreamHandler receives one key range in etcd's order: a full list, then
// every change. Calls come from the Stream goroutine, one at a time.
type StreamHandler interface {
	// OnList delivers every key of the range at rev. It replaces all
	// earlier state; reason says why the range was listed.
	OnList(kvs []*mvccpb.KeyValue, rev int64, reason ListReason)
	// OnEvents delivers one watch response: whole revisions, in revision
	// order. rev is the revision everything up to which has now been
	// delivered (it also moves on progress notifications, with no events).
	OnEvents(evs []*clientv3.Event, rev int64)
}

// ListReason says why a Stream listed its range (again).
type ListReason string

// Why a stream lists: the first time, and each time it cannot resume.
const (
	ListStart ListReason = "start"
	// ListCompacted: the revision to resume from was compacted away.
	ListCompacted ListReason = "compacted"
	// ListRolledBack: etcd's revision is behind what was delivered
	// (restored from a backup, or a wiped member).
	ListRolledBack ListReason = "revision went back"
	// ListClusterChanged: the endpoints now answer for another etcd
	// cluster.
	ListClusterChanged ListReason = "etcd cluster changed"
	// ListDiverged: the probe key differs from what was delivered at a
	// revision already seen: etcd holds another history.
	ListDiverged ListReason = "history diverged"
	// ListRequested: the handler asked for the current state (Relister).
	ListRequested ListReason = "requested"
)

// ListStreamer is a StreamHandler that takes a list as it is read, page
// by page, instead of whole: the stream then never holds a big
// cluster's list, and the handler can keep only what it needs of each
// key (the stream prefers OnListStream to OnList). kvs yields every key
// of the range at rev, in key order; the keys it yields are the
// handler's to keep. When reading the list fails part
// way, kvs yields the error last: the handler must then drop what it
// took of that list and keep its earlier state (the stream lists again).
// The handler must range over all of kvs.
type ListStreamer interface {
	OnListStream(kvs iter.Seq2[*mvccpb.KeyValue, error], rev int64, reason ListReason)
}

// HeadTaker is a ListStreamer told, as a list from etcd is read whole
// (before kvs ends), etcd's revision at that moment: head. The list is
// at rev, the revision of its first page; what was written while it was
// read (rev to head) comes next in OnEvents, and the stream asks etcd
// for progress often until its revision reaches head, so a handler
// that waits for head is not kept waiting by writes outside the range.
type HeadTaker interface {
	OnListHead(head int64)
}

// Relister is a StreamHandler that can ask for the range to be listed
// again: after each OnEvents call the stream asks WantList, and when it
// reports true the stream lists at the current revision (reason
// ListRequested) and then follows from there. A handler that keeps no
// copy of the range uses it to rebuild its state when it needs it.
type Relister interface {
	WantList() bool
}

// StreamOptions tune a Stream; the zero value is usable.
type StreamOptions struct {
	// Beat is marked whenever the stream makes progress (a response, a
	// progress notification, an attempt to reconnect): liveness reads it.
	Beat *heartbeat.Beat
	// ProbeKey is a key in the range that identifies its history (the
	// cluster identity). When resuming, a probe key whose revision
	// differs from the one delivered, at a revision already delivered,
	// means etcd holds other data: the stream lists instead.
	ProbeKey string
	// OnResume is called each time the watch resumes from its revision
	// after breaking, without a list.
	OnResume func()
	// ListPrefixes, when set, are the parts of the range a list reads
	// (each under prefix, read at one revision); the watch still covers
	// all of prefix. Keys a handler never wants are not listed at all,
	// yet their changes keep the watch's revision moving.
	ListPrefixes []string
	// Nudge, when set, makes the stream call OnEvents with no events at
	// the revision delivered so far each time it receives, on the
	// stream's goroutine (so a handler can reconsider what it holds
	// without waiting for a change).
	Nudge <-chan struct{}
	// Cache, when set, keeps a node-local copy of the list: a stream
	// that starts with a usable copy delivers it (ListCache) once the
	// watch brought it up to etcd's revision at start (streamcache.go).
	Cache StreamCache
}

// listPage bounds each list request, so a large cluster's state is read
// in pieces etcd can serve without one huge response. etcd counts every
// key left in the range for each page, so a list costs about n²/listPage
// key visits: at 150,000 endpoints (1 KiB each) 500 took 8.2 s, 5,000
// 2.7 s (BenchmarkListLarge, same run); a page is then about 5 MB.
const listPage = 5000

// listPageSize is listPage; benchmarks compare others.
var listPageSize = listPage

// progressEvery is how often a watch asks etcd for a progress
// notification (a message on the watch stream, not a request): a watch
// that gets no answer for a while has stalled.
const progressEvery = 30 * time.Second

// Stream lists every key under prefix and follows it with one watch, so
// h sees all changes of the range in etcd's order, until ctx ends. After
// the watch breaks it resumes from the last revision delivered when etcd
// still holds that history, and lists again (with the reason) when it
// cannot: compaction, a rollback, another cluster. It returns ctx's
// error.
func (c *Client) Stream(ctx context.Context, prefix string, h StreamHandler, o StreamOptions) error {
	s := &stream{c: c, prefix: prefix, h: h, o: o, reason: ListStart}
	s.loadCache()
	retry := backoff.New(100*time.Millisecond, 5*time.Second)
	for ctx.Err() == nil {
		start := time.Now()
		o.Beat.Mark()
		err := s.once(ctx)
		if ctx.Err() != nil {
			break
		}
		if errors.Is(err, errListRequested) || errors.Is(err, errCacheUnreadable) {
			continue // list again at once: not a failure
		}
		if time.Since(start) > 10*time.Second {
			retry.Reset() // it ran a while: not a tight failure loop
		}
		log.WithError(err).WithField("prefix", prefix).Info("watch broke; resuming")
		if !retry.Wait(ctx) {
			break
		}
	}
	return ctx.Err()
}

type stream struct {
	c      *Client
	prefix string
	h      StreamHandler
	o      StreamOptions
	// rev is the revision delivered so far; 0 until the first list and
	// after anything that forces a list (reason says what).
	rev       int64
	reason    ListReason
	clusterID uint64
	probeRev  int64 // ModRevision of ProbeKey as delivered; 0 when absent
	// etcdRev is etcd's revision at the last resume check; cu is a
	// loaded cache not delivered yet (streamcache.go).
	etcdRev int64
	cu      *catchUp
	// listHead is etcd's revision when the last list was read whole
	// (HeadTaker); the watch asks for progress often until rev reaches it.
	listHead int64
}

// once lists or resumes, then follows the watch until it breaks.
func (s *stream) once(ctx context.Context) error {
	if s.rev != 0 {
		if err := s.checkResume(ctx); err != nil {
			return err
		}
		s.cacheTooFar()
	}
	if s.rev == 0 {
		s.dropCache(s.reason)
		if err := s.list(ctx); err != nil {
			return err
		}
	} else if s.cu != nil {
		if err := s.deliverCacheIfCaughtUp(); err != nil {
			return err
		}
	} else if s.o.OnResume != nil {
		s.o.OnResume()
	}
	err := s.follow(ctx)
	if errors.Is(err, errCompacted) {
		s.rev, s.reason = 0, ListCompacted
	}
	return err
}

// checkResume decides whether etcd still holds the history delivered so
// far, with one read; when it does not, it clears rev to list again.
func (s *stream) checkResume(ctx context.Context) error {
	key := s.o.ProbeKey
	if key == "" {
		key = s.prefix
	}
	cctx, cancel := s.c.Ctx(ctx)
	resp, err := s.c.etcd.Get(cctx, key, clientv3.WithLimit(1))
	cancel()
	if err != nil {
		return s.c.wrap(err)
	}
	s.etcdRev = resp.Header.Revision
	probeRev := int64(0)
	if s.o.ProbeKey != "" && len(resp.Kvs) == 1 {
		probeRev = resp.Kvs[0].ModRevision
	}
	switch {
	case resp.Header.ClusterId != s.clusterID:
		s.reason = ListClusterChanged
	case resp.Header.Revision < s.rev:
		s.reason = ListRolledBack
	case s.o.ProbeKey != "" && probeRev != s.probeRev && probeRev <= s.rev:
		s.reason = ListDiverged
	default:
		return nil
	}
	log.WithFields(map[string]any{"prefix": s.prefix, "reason": s.reason, "delivered": s.rev, "etcd": resp.Header.Revision}).Warn("cannot resume the watch; listing again")
	s.rev = 0
	if s.o.Cache != nil && s.cu == nil {
		// At once, not at the list's first page: that may be long in
		// coming (etcd just came back), and until then the cache would
		// write the lost history's copy.
		s.o.Cache.HistoryLost(s.reason)
	}
	return nil
}

// list reads the range at one revision, page by page, handing each page
// to the cache and the handler as it comes (a ListStreamer takes the
// keys as they are read; another handler gets them whole at the end),
// and moves the stream to that revision.
func (s *stream) list(ctx context.Context) error {
	began := time.Now()
	s.listHead = 0
	pg, err := s.c.newPager(s.prefix, s.o.ListPrefixes)
	if err != nil {
		return err
	}
	defer pg.close()
	first, err := pg.next(ctx)
	if err != nil {
		return err
	}
	rev, cluster := pg.rev, pg.cluster
	if s.o.Cache != nil {
		s.o.Cache.ListStarted(rev, cluster)
	}
	var probeRev int64
	var failed error
	keys, read := 0, false
	seq := func(yield func(*mvccpb.KeyValue, error) bool) {
		page := first
		first = nil
		for {
			if s.o.Cache != nil {
				s.o.Cache.ListPage(page)
			}
			for _, kv := range page {
				if string(kv.Key) == s.o.ProbeKey {
					probeRev = kv.ModRevision
				}
				keys++
				if !yield(kv, nil) {
					return
				}
			}
			if page, failed = pg.next(ctx); failed != nil {
				yield(nil, failed)
				return
			}
			if page == nil {
				// Read whole: the cache has it before the handler
				// acts on it (a node stopped right after its first
				// delivery still writes it on the way out).
				read = true
				if s.o.Cache != nil {
					s.o.Cache.Listed(rev, cluster)
				}
				if ht, ok := s.h.(HeadTaker); ok {
					s.listHead = pg.head
					ht.OnListHead(pg.head)
				}
				return
			}
		}
	}
	s.deliverList(seq, rev, s.reason)
	if failed != nil {
		return failed
	}
	if !read {
		return errListNotRead
	}
	s.rev, s.clusterID, s.probeRev = rev, cluster, probeRev
	log.WithFields(map[string]any{"prefix": s.prefix, "reason": s.reason, "revision": rev, "keys": keys,
		"took": time.Since(began).Round(time.Millisecond)}).Info("listed the datastore")
	return nil
}

// deliverList hands the handler a list as it is read: key by key to a
// ListStreamer; whole, once read whole, to another handler (nothing when
// it failed part way: kvs then yields an error last).
func (s *stream) deliverList(kvs iter.Seq2[*mvccpb.KeyValue, error], rev int64, reason ListReason) {
	if ls, ok := s.h.(ListStreamer); ok {
		ls.OnListStream(kvs, rev, reason)
		return
	}
	var all []*mvccpb.KeyValue
	for kv, err := range kvs {
		if err != nil {
			return
		}
		all = append(all, kv)
	}
	s.h.OnList(all, rev, reason)
}

// pager reads every key under each of its parts at one revision (the
// first page's), listPage keys per request.
type pager struct {
	c        *Client
	parts    []string
	key, end string // the next page's range in parts[0]
	rev      int64
	cluster  uint64
	head     int64 // etcd's revision at the latest page
	cuts     listCuts
	ahead    *readAhead // the rest of parts[0], read side by side
}

// newPager reads prefix, or only parts of it when parts are given: in
// key order (the parts sorted, a part inside another read once with it).
func (c *Client) newPager(prefix string, parts []string) (*pager, error) {
	if len(parts) == 0 {
		parts = []string{prefix}
	}
	for _, p := range parts {
		if !strings.HasPrefix(p, prefix) {
			return nil, fmt.Errorf("datastore: list prefix %q is outside the stream's range %q", p, prefix)
		}
	}
	var read []string
	for _, p := range slices.Sorted(slices.Values(parts)) {
		if len(read) == 0 || !strings.HasPrefix(p, read[len(read)-1]) {
			read = append(read, p)
		}
	}
	pg := &pager{c: c, parts: read}
	pg.key, pg.end = read[0], clientv3.GetPrefixRangeEnd(read[0])
	return pg, nil
}

// next returns the next page (nil at the end), having set rev and
// cluster from the first.
func (pg *pager) next(ctx context.Context) ([]*mvccpb.KeyValue, error) {
	for len(pg.parts) > 0 {
		if pg.ahead == nil && pg.rev != 0 && pg.key >= endpointsPrefix {
			// Every Node was read (they sort before the endpoints):
			// the cuts are known.
			if b := pg.cuts.bounds(pg.key, pg.end); len(b) > 1 {
				pg.ahead = pg.c.readRanges(ctx, b, pg.end, pg.rev)
			}
		}
		if pg.ahead != nil {
			resp, err := pg.ahead.next()
			if err != nil {
				return nil, err
			}
			if resp == nil {
				pg.close()
				if pg.parts = pg.parts[1:]; len(pg.parts) > 0 {
					pg.key, pg.end = pg.parts[0], clientv3.GetPrefixRangeEnd(pg.parts[0])
				}
				continue
			}
			pg.head = max(pg.head, resp.Header.Revision)
			pg.cluster = resp.Header.ClusterId
			if len(resp.Kvs) > 0 {
				return resp.Kvs, nil
			}
			continue
		}
		end := pg.cuts.end(pg.key, pg.end)
		resp, err := pg.c.listPageRetrying(ctx, pg.key, end, pg.rev)
		if err != nil {
			return nil, err
		}
		if pg.rev == 0 {
			pg.rev = resp.Header.Revision
		}
		pg.head = max(pg.head, resp.Header.Revision)
		pg.cluster = resp.Header.ClusterId
		pg.cuts.note(resp.Kvs)
		switch {
		case resp.More && len(resp.Kvs) > 0:
			pg.key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		case end != pg.end:
			pg.key = end // the rest of the part, from the cut
		default:
			if pg.parts = pg.parts[1:]; len(pg.parts) > 0 {
				pg.key, pg.end = pg.parts[0], clientv3.GetPrefixRangeEnd(pg.parts[0])
			}
		}
		if len(resp.Kvs) > 0 {
			return resp.Kvs, nil
		}
	}
	return nil, nil
}

// close stops what is read side by side; a list that ends early calls
// it.
func (pg *pager) close() {
	if pg.ahead != nil {
		pg.ahead.close()
		pg.ahead = nil
	}
}

// listRanges reads every key under each of parts (all of prefix when
// parts is empty) at one revision, and returns them with that revision
// and etcd's cluster ID.
func (c *Client) listRanges(ctx context.Context, prefix string, parts []string) ([]*mvccpb.KeyValue, int64, uint64, error) {
	pg, err := c.newPager(prefix, parts)
	if err != nil {
		return nil, 0, 0, err
	}
	defer pg.close()
	var kvs []*mvccpb.KeyValue
	for {
		page, err := pg.next(ctx)
		if err != nil {
			return nil, 0, 0, err
		}
		if page == nil {
			return kvs, pg.rev, pg.cluster, nil
		}
		kvs = append(kvs, page...)
	}
}

// pageRetries is how many times a page at the list's revision is read
// again after etcd did not answer in time, before the list fails.
const pageRetries = 5

// listPageRetrying reads one page; a page at the list's revision that
// etcd did not answer in time (a busy etcd) is read again, from the same
// key at the same revision, instead of failing the list and starting it
// over (which a node restarted under churn did, 26 s into a 45 s list).
func (c *Client) listPageRetrying(ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
	wait := backoff.New(200*time.Millisecond, 2*time.Second)
	for attempt := 0; ; attempt++ {
		resp, err := readPage(c, ctx, key, end, rev)
		if err == nil {
			return resp, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err() // the list was given up, not etcd
		}
		err = c.wrap(err)
		if rev == 0 || attempt == pageRetries || !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		log.WithError(err).WithFields(map[string]any{"key": key, "revision": rev, "attempt": attempt + 1}).Info("reading the list's page again")
		if !wait.Wait(ctx) {
			return nil, ctx.Err()
		}
	}
}

// readPage is listPage; a test makes etcd miss a page.
var readPage = (*Client).listPage

// listPage reads one page of [key, end) at rev (0: now). A page at a
// revision already read is a serializable read: the history up to rev
// cannot change, and a linearizable one waits for the member to confirm
// its leader and apply everything committed, which under a heavy write
// load made each page of a 150,000-endpoint list wait seconds (a node
// restarted under churn took 80 s to list, 2 s when quiet). A member
// that has not applied rev yet says so, and the page is read
// linearizably.
func (c *Client) listPage(ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
	opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(listPageSize))}
	if rev != 0 {
		opts = append(opts, clientv3.WithRev(rev))
		lctx, cancel := c.Ctx(ctx)
		resp, err := c.etcd.Get(lctx, key, append(opts, clientv3.WithSerializable())...)
		cancel()
		if !errors.Is(err, rpctypes.ErrFutureRev) && !errors.Is(err, rpctypes.ErrGRPCFutureRev) {
			return resp, err
		}
	}
	lctx, cancel := c.Ctx(ctx)
	defer cancel()
	return c.etcd.Get(lctx, key, opts...)
}

// follow watches from s.rev+1 until the watch breaks, delivering each
// response in order and moving s.rev on.
func (s *stream) follow(ctx context.Context) error {
	// RequireLeader makes a member cut off from the cluster end the
	// watch instead of going silent.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	// clientv3 silently re-opens a watch whose connection broke. A lost
	// connection ends this watch instead, so that checkResume runs
	// before anything etcd says afterwards is believed.
	lost := make(chan struct{})
	go watchConnection(wctx, s.c.etcd.ActiveConnection(), func() { close(lost); wcancel() })
	go func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				_ = s.c.etcd.RequestProgress(wctx)
			}
		}
	}()
	// The created notification's header says where etcd is at the
	// watch's first creation (clientv3 does not pass it on when it
	// re-opens a watch; watchConnection covers that): behind what was
	// delivered, etcd came back with another history since the last read.
	wch := s.c.etcd.Watch(wctx, s.prefix, clientv3.WithPrefix(), clientv3.WithRev(s.rev+1), clientv3.WithProgressNotify(), clientv3.WithCreatedNotify())
	if s.cu != nil {
		s.cu.watching = time.Now()
		go requestCatchUpProgress(wctx, func() { _ = s.c.etcd.RequestProgress(wctx) }, s.cu.done)
	}
	// After a list: progress until the revision etcd had when it was
	// read whole (HeadTaker), even if nothing more under the prefix
	// was written.
	var atHead chan struct{}
	if s.listHead > s.rev {
		atHead = make(chan struct{})
		go requestCatchUpProgress(wctx, func() { _ = s.c.etcd.RequestProgress(wctx) }, atHead)
	}
	for {
		var wr clientv3.WatchResponse
		var ok bool
		select {
		case wr, ok = <-wch:
		case <-s.o.Nudge:
			if s.cu != nil {
				continue // nothing delivered yet
			}
			s.h.OnEvents(nil, s.rev)
			if s.wantList() {
				return errListRequested
			}
			continue
		}
		if !ok {
			break
		}
		s.o.Beat.Mark()
		if wr.CompactRevision != 0 {
			return errCompacted
		}
		if err := wr.Err(); err != nil {
			return err
		}
		if h := wr.Header; h.ClusterId != 0 && (h.ClusterId != s.clusterID || h.Revision < s.rev) {
			// etcd is behind what was delivered (a restore between the
			// last read and the watch's creation, or a lagging
			// follower: then checkResume passes and the watch starts
			// again after the backoff), or another cluster (caught at
			// its next response). checkResume decides, before anything
			// more is believed. A restore under a running watch sends
			// nothing here (etcd sends no progress to a watch ahead of
			// it): watchConnection catches that.
			lg := log.WithFields(map[string]any{"prefix": s.prefix, "delivered": s.rev, "etcd": h.Revision,
				"cluster": fmt.Sprintf("%x", h.ClusterId), "listedFrom": fmt.Sprintf("%x", s.clusterID)})
			if h.ClusterId != s.clusterID {
				lg.Warn("the watch's etcd is another cluster than the one listed from; checking")
			} else {
				// Most often a member lagging behind the one last read
				// (the watch starts again after the backoff); a
				// restore is reported by checkResume.
				lg.Debug("the watch's etcd is behind what was delivered; checking")
			}
			return errHistoryInDoubt
		}
		if wr.Created {
			continue
		}
		rev := s.rev
		switch {
		case len(wr.Events) > 0:
			rev = wr.Events[len(wr.Events)-1].Kv.ModRevision
		case wr.IsProgressNotify():
			rev = max(rev, wr.Header.Revision)
		}
		for _, ev := range wr.Events {
			if string(ev.Kv.Key) == s.o.ProbeKey {
				s.probeRev = ev.Kv.ModRevision
				if ev.Type == clientv3.EventTypeDelete {
					s.probeRev = 0
				}
			}
		}
		s.rev = rev
		if atHead != nil && s.rev >= s.listHead {
			close(atHead)
			atHead = nil
		}
		if s.o.Cache != nil {
			s.o.Cache.Changed(wr.Events, rev)
		}
		if s.cu != nil {
			if err := s.catchUpEvents(wr.Events); err != nil {
				return err
			}
			continue
		}
		s.h.OnEvents(wr.Events, rev)
		if s.wantList() {
			return errListRequested
		}
	}
	select {
	case <-lost:
		return errConnectionLost
	default:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errWatchClosed
	}
}

// wantList reports whether the handler asked for a list; the next
// attempt lists at once.
func (s *stream) wantList() bool {
	r, ok := s.h.(Relister)
	if !ok || !r.WantList() {
		return false
	}
	s.rev, s.reason = 0, ListRequested
	return true
}

// watchConnection calls lost once conn is not ready, or returns when ctx
// ends. The caller's last read (the list, or checkResume's probe) went
// through conn, so conn was ready then: a connection found broken when
// the watch starts broke since that read (etcd may have come back with
// other data meanwhile, and a watch from a revision etcd has not reached
// would wait silently), and counts as lost too. With several endpoints
// conn stays ready while any one is, and a watch that moves to another
// member of the same cluster resumes correctly, so only a total loss
// counts.
func watchConnection(ctx context.Context, conn *grpc.ClientConn, lost func()) {
	// Any change from ready is a loss, even one back to ready by the
	// time it is looked at (a quick restart).
	if conn.GetState() != connectivity.Ready || conn.WaitForStateChange(ctx, connectivity.Ready) {
		lost()
	}
}

type watchError string

func (e watchError) Error() string { return string(e) }

const (
	errCompacted   = watchError("datastore: watch revision was compacted")
	errWatchClosed = watchError("datastore: watch channel closed")
	// errConnectionLost ends a watch whose connection to etcd broke.
	errConnectionLost = watchError("datastore: connection to etcd lost")
	// errHistoryInDoubt ends a watch whose etcd is behind what was
	// delivered, or is another cluster.
	errHistoryInDoubt = watchError("datastore: the watch's etcd is behind what was delivered")
	// errListRequested ends a watch whose handler asked for a list.
	errListRequested = watchError("datastore: the handler asked for a list")
	// errListNotRead: the handler stopped ranging over a list before
	// its end; the stream lists again.
	errListNotRead = watchError("datastore: the handler did not read the whole list")
)
