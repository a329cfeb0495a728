package datastore

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
)

// RawHandler receives the raw key-values under a prefix: first a full
// snapshot, then every change. After a resync (compaction, a broken
// watch, an etcd outage) it receives a fresh snapshot that replaces all
// earlier state. Calls come from one goroutine, in revision order.
type RawHandler interface {
	OnRawSnapshot(kvs []*mvccpb.KeyValue, rev int64)
	OnRawEvent(ev *clientv3.Event)
}

// resyncBackoff bounds how fast a failing watch retries.
const (
	resyncMinBackoff = 100 * time.Millisecond
	resyncMaxBackoff = 5 * time.Second
)

// WatchPrefix lists prefix and watches it from that revision until ctx
// ends, resyncing by itself whenever the watch cannot continue. It
// returns only ctx's error.
func (c *Client) WatchPrefix(ctx context.Context, prefix string, h RawHandler) error {
	backoff := resyncMinBackoff
	for ctx.Err() == nil {
		start := time.Now()
		err := c.watchOnce(ctx, prefix, h)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > 10*time.Second {
			backoff = resyncMinBackoff // it ran a while: not a tight failure loop
		}
		log.WithError(err).WithField("prefix", prefix).Info("resyncing watch")
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, resyncMaxBackoff)
	}
	return ctx.Err()
}

// watchOnce does one snapshot and follows the watch until it breaks.
func (c *Client) watchOnce(ctx context.Context, prefix string, h RawHandler) error {
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

	lctx, cancel := c.Ctx(ctx)
	resp, err := c.etcd.Get(lctx, prefix, clientv3.WithPrefix())
	cancel()
	if err != nil {
		return c.wrap(err)
	}
	rev := resp.Header.Revision
	h.OnRawSnapshot(resp.Kvs, rev)

	wch := c.etcd.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for wr := range wch {
		if wr.CompactRevision != 0 {
			return errCompacted
		}
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
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
