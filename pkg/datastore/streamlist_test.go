package datastore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
)

// pageRecorder is a ListStreamer: it takes lists key by key, and keeps a
// list only when it was read whole.
type pageRecorder struct {
	mu      sync.Mutex
	state   map[string]string
	reasons []ListReason
	cut     []int // keys taken of each list that was cut short
}

func (r *pageRecorder) OnListStream(kvs iter.Seq2[*mvccpb.KeyValue, error], rev int64, reason ListReason) {
	next := map[string]string{}
	for kv, err := range kvs {
		if err != nil {
			r.mu.Lock()
			r.cut = append(r.cut, len(next))
			r.mu.Unlock()
			return
		}
		next[string(kv.Key)] = string(kv.Value)
	}
	r.mu.Lock()
	r.state, r.reasons = next, append(r.reasons, reason)
	r.mu.Unlock()
}

func (r *pageRecorder) OnList([]*mvccpb.KeyValue, int64, ListReason) {
	panic("a ListStreamer was handed a whole list")
}

func (r *pageRecorder) OnEvents([]*clientv3.Event, int64) {}

// callCache is a StreamCache that records the list's calls; a loaded
// copy, when set, is what Load returns.
type callCache struct {
	mu     sync.Mutex
	calls  []string
	loaded *CachedList
	closed int
}

func (c *callCache) record(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, s)
}

func (c *callCache) Load(string, []string, string) (CachedList, bool) {
	if c.loaded == nil {
		return CachedList{}, false
	}
	cl := *c.loaded
	cl.Close = func() { c.mu.Lock(); c.closed++; c.mu.Unlock() }
	return cl, true
}
func (c *callCache) ListStarted(int64, uint64) { c.record("started") }
func (c *callCache) ListPage(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		c.record("key " + string(kv.Key))
	}
}
func (c *callCache) Listed(int64, uint64)             { c.record("listed") }
func (c *callCache) Changed([]*clientv3.Event, int64) {}
func (c *callCache) Discarded(r ListReason)           { c.record("discarded " + string(r)) }
func (c *callCache) Restored(int64, time.Duration)    { c.record("restored") }
func (c *callCache) HistoryLost(r ListReason)         { c.record("history lost " + string(r)) }

func (c *callCache) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// TestListCutShortDeliversNothing: a list that fails after its first
// page (etcd lost the page for good) reaches a ListStreamer as keys then
// the error, and the cache never hears it was listed; the stream lists
// again and both get the whole range. The handler reads the list as
// etcd's pages come, never whole. Not parallel: it swaps readPage.
func TestListCutShortDeliversNothing(t *testing.T) {
	c, _ := newTestClient(t)
	for i := range 7 {
		put(t, c, fmt.Sprintf("/m/k%d", i), "1")
	}
	defer func(n int) { listPageSize = n }(listPageSize)
	listPageSize = 3
	var mu sync.Mutex
	lost := false
	readPage = func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if rev != 0 && !lost {
			lost = true
			return nil, errors.New("page lost")
		}
		return c.listPage(ctx, key, end, rev)
	}
	defer func() { readPage = (*Client).listPage }()

	r, cache := &pageRecorder{}, &callCache{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Stream(ctx, "/m/", r, StreamOptions{Cache: cache}); close(done) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.state) != 7 || !slices.Contains(cache.snapshot(), "listed") {
			return fmt.Sprintf("holding %d keys; the cache heard %q", len(r.state), cache.snapshot())
		}
		return ""
	})
	r.mu.Lock()
	cut, reasons := slices.Clone(r.cut), slices.Clone(r.reasons)
	r.mu.Unlock()
	if !slices.Equal(cut, []int{3}) || !slices.Equal(reasons, []ListReason{ListStart}) {
		t.Fatalf("lists cut short after %v keys, delivered %v; want one cut after the first page (3 keys), then one whole", cut, reasons)
	}
	calls := cache.snapshot()
	want := []string{"started", "key /m/k0", "key /m/k1", "key /m/k2", "started"}
	for i := range 7 {
		want = append(want, fmt.Sprintf("key /m/k%d", i))
	}
	want = append(want, "listed")
	if !slices.Equal(calls, want) {
		t.Fatalf("cache calls %q\nwant %q", calls, want)
	}
}

// TestCacheUnreadableWhenDeliveredLists: a loaded cache whose second
// read fails (its checksum no longer matches) is not delivered, not
// even in part, to a handler that takes lists whole: the stream says so
// to the cache, releases the copy and lists etcd with the reason.
func TestCacheUnreadableWhenDeliveredLists(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	put(t, c, "/u/a", "etcd")
	rev := put(t, c, "/u/b", "etcd")
	resp, err := c.etcd.Get(context.Background(), "/u/a")
	if err != nil {
		t.Fatal(err)
	}
	cache := &callCache{loaded: &CachedList{Revision: rev, ClusterID: resp.Header.ClusterId, Keys: 2,
		Read: func(yield func(*mvccpb.KeyValue, error) bool) {
			if yield(&mvccpb.KeyValue{Key: []byte("/u/a"), Value: []byte("stale"), ModRevision: 1}, nil) {
				yield(nil, errors.New("checksum mismatch"))
			}
		}}}
	r := newStreamRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Stream(ctx, "/u/", r, StreamOptions{Cache: cache}); close(done) }()
	defer func() { cancel(); <-done }()
	r.waitFor(t, "a list from etcd", func() bool { return len(r.reasons) > 0 })
	r.mu.Lock()
	reasons, state := slices.Clone(r.reasons), fmt.Sprint(r.state)
	r.mu.Unlock()
	if !slices.Equal(reasons, []ListReason{ListCacheUnreadable}) || state != "map[/u/a:etcd /u/b:etcd]" {
		t.Fatalf("lists %v, state %s; want one list from etcd (reason %q)", reasons, state, ListCacheUnreadable)
	}
	calls := cache.snapshot()
	if len(calls) == 0 || calls[0] != "discarded "+string(ListCacheUnreadable) || slices.Contains(calls, "restored") {
		t.Fatalf("cache calls %q: want the copy discarded as unreadable, never restored", calls)
	}
	cache.mu.Lock()
	closed := cache.closed
	cache.mu.Unlock()
	if closed != 1 {
		t.Fatalf("the loaded copy was closed %d times, want once", closed)
	}
}

// headRecorder is a pageRecorder that is a HeadTaker and keeps the
// revisions OnEvents was called with.
type headRecorder struct {
	pageRecorder
	listRev, head, evRev int64
}

func (r *headRecorder) OnListStream(kvs iter.Seq2[*mvccpb.KeyValue, error], rev int64, reason ListReason) {
	r.pageRecorder.OnListStream(kvs, rev, reason)
	r.mu.Lock()
	r.listRev = rev
	r.mu.Unlock()
}

func (r *headRecorder) OnListHead(head int64) {
	r.mu.Lock()
	r.head = head
	r.mu.Unlock()
}

func (r *headRecorder) OnEvents(_ []*clientv3.Event, rev int64) {
	r.mu.Lock()
	r.evRev = max(r.evRev, rev)
	r.mu.Unlock()
}

// TestListHeadReachedWithoutEvents: a list during which etcd moved on
// tells a HeadTaker etcd's revision when it was read whole, and the
// stream brings its revision there soon even when nothing was written
// under its prefix (progress asked for often, not every 30 s).
func TestListHeadReachedWithoutEvents(t *testing.T) {
	c, _ := newTestClient(t)
	for i := range 4 {
		put(t, c, fmt.Sprintf("/h/k%d", i), "1")
	}
	defer func(n int) { listPageSize = n }(listPageSize)
	listPageSize = 2
	var mu sync.Mutex
	var outside int64
	readPage = func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if rev != 0 && outside == 0 {
			// Written while the list is read, outside its range.
			resp, err := c.Etcd().Put(ctx, "/elsewhere", "x")
			if err != nil {
				return nil, err
			}
			outside = resp.Header.Revision
		}
		return c.listPage(ctx, key, end, rev)
	}
	defer func() { readPage = (*Client).listPage }()

	r := &headRecorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Stream(ctx, "/h/", r, StreamOptions{}); close(done) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if len(r.state) != 4 || outside == 0 || r.head < outside || r.evRev < r.head {
			return fmt.Sprintf("%d keys listed at %d, head %d (the write outside at %d), events up to %d", len(r.state), r.listRev, r.head, outside, r.evRev)
		}
		return ""
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listRev >= outside {
		t.Fatalf("listed at %d, not before the write outside at %d: the test did not write during the list", r.listRev, outside)
	}
}
