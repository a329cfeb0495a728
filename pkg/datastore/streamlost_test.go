package datastore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
)

// TestStreamTellsCacheHistoryLost: etcd comes back with other data (a
// restored backup, a wiped member) under a running stream. The cache
// hears at once that the history it followed is gone, before the new
// list's first page, which here is long in coming: until then it would
// go on writing the lost history's copy. Not parallel: it swaps readPage
// and the restart reuses fixed ports.
func TestStreamTellsCacheHistoryLost(t *testing.T) {
	e := newRestartableEtcd(t)
	c := connect(t, Config{Endpoints: e.srv.Endpoints, RequestTimeout: time.Second})
	for _, k := range []string{"n1", "n2", "n3", "n4", "n5"} {
		put(t, c, "/h/"+k, "x")
	}
	var pagesFail atomic.Bool
	readPage = func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		if pagesFail.Load() {
			return nil, errors.New("no pages for now")
		}
		return c.listPage(ctx, key, end, rev)
	}
	defer func() { readPage = (*Client).listPage }()

	r, cache := newStreamRecorder(), &callCache{}
	startStreamWith(t, c, "/h/", r, StreamOptions{Cache: cache})
	r.waitFor(t, "the list", func() bool { return len(r.state) == 5 })

	pagesFail.Store(true)
	e.stop()
	e.cfg.Dir = t.TempDir()
	e.start()
	put(t, c, "/h/fresh", "y")
	lost := "history lost " + string(ListRolledBack)
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() string {
		if !slices.Contains(cache.snapshot(), lost) {
			return fmt.Sprintf("the cache heard %q, not %q", cache.snapshot(), lost)
		}
		return ""
	})
	pagesFail.Store(false)
	r.waitFor(t, "a list of the new data", func() bool { return r.keys() == "/h/fresh" })
	want := []string{"listed", lost, "started", "key /h/fresh", "listed"}
	if calls := cache.snapshot(); len(calls) < len(want) || !slices.Equal(calls[len(calls)-len(want):], want) {
		t.Errorf("the cache heard %q; want it to end %q", calls, want)
	}
}
