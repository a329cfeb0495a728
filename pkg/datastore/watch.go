package datastore

import (
	"context"
	"github.com/routed-net/routed/internal/heartbeat"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// RawHandler receives the raw key-values under a prefix: first a full
// snapshot, then every change. After a resync (compaction, a broken
// watch, an etcd outage) it receives a fresh snapshot that replaces all
// earlier state. Calls come from one goroutine; the events of one key
// range come in revision order (see WatchRanges for several).
type RawHandler interface {
	OnRawSnapshot(kvs []*mvccpb.KeyValue, rev int64)
	OnRawEvent(ev *clientv3.Event)
}

// resyncBackoff bounds how fast a failing watch retries.
const (
	resyncMinBackoff = 100 * time.Millisecond
	resyncMaxBackoff = 5 * time.Second
)

// KeyRange is a span of keys: [Key, End), or every key starting with Key
// when End is empty.
type KeyRange struct{ Key, End string }

func (r KeyRange) end() string {
	if r.End == "" {
		return clientv3.GetPrefixRangeEnd(r.Key)
	}
	return r.End
}

// listPage bounds each list request, so a large cluster's state is read
// in pieces etcd can serve without one huge response.
const listPage = 500

// WatchPrefix lists prefix and watches it from that revision until ctx
// ends, resyncing by itself whenever the watch cannot continue. It
// returns only ctx's error.
func (c *Client) WatchPrefix(ctx context.Context, prefix string, h RawHandler) error {
	return c.WatchRanges(ctx, []KeyRange{{Key: prefix}}, h)
}

// WatchRanges is WatchPrefix over several key ranges: one snapshot of all
// of them at one revision, then one watch per range. Events of one range
// arrive in revision order; events of different ranges may interleave
// out of order.
func (c *Client) WatchRanges(ctx context.Context, ranges []KeyRange, h RawHandler) error {
	return c.watchRanges(ctx, ranges, h, nil)
}

// progressEvery is how often a watch asks etcd for a progress
// notification (a message on the watch stream, not a request): a watch
// that gets no answer for a while has stalled.
const progressEvery = 30 * time.Second

// watchRanges is WatchRanges marking beat whenever the watch makes
// progress: a response, a progress notification, or an attempt to
// resync. A handler that blocks or a stream that hangs stops the beat.
func (c *Client) watchRanges(ctx context.Context, ranges []KeyRange, h RawHandler, beat *heartbeat.Beat) error {
	backoff := resyncMinBackoff
	for ctx.Err() == nil {
		start := time.Now()
		beat.Mark()
		err := c.watchOnce(ctx, ranges, h, beat)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			backoff = resyncMinBackoff // it ran a while: not a tight failure loop
		}
		log.WithError(err).WithField("range", ranges[0].Key).Info("resyncing watch")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, resyncMaxBackoff)
	}
	return ctx.Err()
}

// list reads every key of ranges at one revision, listPage keys per
// request, and returns them with that revision.
func (c *Client) list(ctx context.Context, ranges []KeyRange) ([]*mvccpb.KeyValue, int64, error) {
	var kvs []*mvccpb.KeyValue
	var rev int64
	for _, r := range ranges {
		key, end := r.Key, r.end()
		for {
			opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
			if rev != 0 {
				opts = append(opts, clientv3.WithRev(rev))
			}
			lctx, cancel := c.Ctx(ctx)
			resp, err := c.etcd.Get(lctx, key, opts...)
			cancel()
			if err != nil {
				return nil, 0, c.wrap(err)
			}
			if rev == 0 {
				rev = resp.Header.Revision
			}
			kvs = append(kvs, resp.Kvs...)
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			key = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	return kvs, rev, nil
}

// watchOnce does one snapshot and follows the watches until one breaks.
func (c *Client) watchOnce(ctx context.Context, ranges []KeyRange, h RawHandler, beat *heartbeat.Beat) error {
	// RequireLeader makes a member cut off from the cluster end the
	// watch instead of going silent.
	wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer wcancel()
	// clientv3 silently re-opens a watch whose connection broke and
	// resumes at the next revision. That is wrong if etcd came back with
	// other data (restored from a backup, a wiped member): changes are
	// skipped or never cleared. So a lost connection ends this watch and
	// the caller resyncs from a fresh snapshot.
	lost := make(chan struct{})
	go watchConnection(wctx, c.etcd.ActiveConnection(), func() { close(lost); wcancel() })

	kvs, rev, err := c.list(ctx, ranges)
	if err != nil {
		return err
	}
	h.OnRawSnapshot(kvs, rev)
	beat.Mark()
	go func() {
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				_ = c.etcd.RequestProgress(wctx)
			}
		}
	}()

	// The watches share wctx, so clientv3 multiplexes them on one gRPC
	// stream. Each range's responses keep their order through the merge.
	type item struct {
		wr  clientv3.WatchResponse
		end bool
	}
	merged := make(chan item)
	for _, r := range ranges {
		wch := c.etcd.Watch(wctx, r.Key, clientv3.WithRange(r.end()), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
		go func() {
			for wr := range wch {
				select {
				case merged <- item{wr: wr}:
				case <-wctx.Done():
					return
				}
			}
			select {
			case merged <- item{end: true}:
			case <-wctx.Done():
			}
		}()
	}
	for {
		var it item
		select {
		case it = <-merged:
		case <-wctx.Done():
			it.end = true
		}
		if it.end {
			break
		}
		beat.Mark()
		if it.wr.CompactRevision != 0 {
			return errCompacted
		}
		if err := it.wr.Err(); err != nil {
			return err
		}
		for _, ev := range it.wr.Events {
			h.OnRawEvent(ev)
		}
	}
	select {
	case <-lost:
		return errConnectionLost
	default:
		return errWatchClosed
	}
}

// watchConnection calls lost once conn, having been ready, stops being
// ready; it returns when ctx ends. With several endpoints conn stays ready
// while any one is, and a watch that moves to another member of the same
// cluster resumes correctly, so only a total loss counts.
func watchConnection(ctx context.Context, conn *grpc.ClientConn, lost func()) {
	wasReady := false
	for {
		st := conn.GetState()
		if st == connectivity.Ready {
			wasReady = true
		} else if wasReady {
			lost()
			return
		}
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

type watchError string

func (e watchError) Error() string { return string(e) }

const (
	errCompacted   = watchError("datastore: watch revision was compacted")
	errWatchClosed = watchError("datastore: watch channel closed")
	// errConnectionLost ends a watch whose connection to etcd broke.
	errConnectionLost = watchError("datastore: connection to etcd lost")
)
