package datastore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/etcdserver"
)

// streamRecorder is what a consumer of Stream believes: key -> value,
// rebuilt by each list and patched by events, with the reasons of the
// lists and the count of resumes.
type streamRecorder struct {
	mu      sync.Mutex
	state   map[string]string
	reasons []ListReason
	rev     int64
	events  int
	resumes int
	// block, when set, is waited on in the first OnList.
	block chan struct{}
}

func newStreamRecorder() *streamRecorder { return &streamRecorder{state: map[string]string{}} }

func (r *streamRecorder) OnList(kvs []*mvccpb.KeyValue, rev int64, reason ListReason) {
	r.mu.Lock()
	r.state = map[string]string{}
	for _, kv := range kvs {
		r.state[string(kv.Key)] = string(kv.Value)
	}
	r.reasons = append(r.reasons, reason)
	r.rev = rev
	block := r.block
	r.block = nil
	r.mu.Unlock()
	if block != nil {
		<-block
	}
}

func (r *streamRecorder) OnEvents(evs []*clientv3.Event, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rev < r.rev {
		panic("stream went back in revision")
	}
	r.rev = rev
	for _, ev := range evs {
		r.events++
		if ev.Type == clientv3.EventTypeDelete {
			delete(r.state, string(ev.Kv.Key))
		} else {
			r.state[string(ev.Kv.Key)] = string(ev.Kv.Value)
		}
	}
}

func (r *streamRecorder) resumed() { r.mu.Lock(); r.resumes++; r.mu.Unlock() }

func (r *streamRecorder) keys() string {
	var ks []string
	for k := range r.state {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return strings.Join(ks, ",")
}

// waitFor polls until cond holds (under the recorder's lock).
func (r *streamRecorder) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if cond() {
			return ""
		}
		return fmt.Sprintf("waiting for %s: keys %s, lists %v", what, r.keys(), r.reasons)
	})
}

func startStream(t *testing.T, c *Client, prefix string, r *streamRecorder, probe string) {
	t.Helper()
	startStreamWith(t, c, prefix, r, StreamOptions{ProbeKey: probe, OnResume: r.resumed})
}

func startStreamWith(t *testing.T, c *Client, prefix string, r *streamRecorder, o StreamOptions) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Stream(ctx, prefix, r, o)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Stream returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Stream did not return after its context was cancelled")
		}
	})
}

func put(t *testing.T, c *Client, key, val string) int64 {
	t.Helper()
	var rev int64
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		resp, err := c.Etcd().Put(context.Background(), key, val)
		if err != nil {
			return fmt.Sprintf("put %s: %v", key, err)
		}
		rev = resp.Header.Revision
		return ""
	})
	return rev
}

// TestStreamListThenEventsInOrder: one list, then every change of the
// range in order, and nothing outside it.
func TestStreamListThenEventsInOrder(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	put(t, c, "/s/a", "1")
	put(t, c, "/other/x", "1")
	r := newStreamRecorder()
	startStream(t, c, "/s/", r, "")
	r.waitFor(t, "the list", func() bool { return len(r.reasons) == 1 })
	if r.keys() != "/s/a" || r.reasons[0] != ListStart {
		t.Fatalf("list: keys %s reason %v", r.keys(), r.reasons)
	}
	put(t, c, "/s/b", "2")
	put(t, c, "/other/y", "2")
	if _, err := c.Etcd().Delete(context.Background(), "/s/a"); err != nil {
		t.Fatal(err)
	}
	last := put(t, c, "/s/c", "3")
	r.waitFor(t, "the changes", func() bool { return r.rev >= last })
	if r.keys() != "/s/b,/s/c" || r.events != 3 {
		t.Fatalf("after the changes: keys %s, %d events (want /s/b,/s/c and 3)", r.keys(), r.events)
	}
}

// TestStreamListsInPages: a range larger than one list page arrives whole.
func TestStreamListsInPages(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ops := make([]clientv3.Op, 0, listPage+7)
	for i := range listPage + 7 {
		ops = append(ops, clientv3.OpPut("/p/"+strings.Repeat("k", 1+i/100)+string(rune('a'+i%26))+string(rune('a'+i/26%26)), "v"))
	}
	for i := 0; i < len(ops); i += 100 {
		if _, err := c.Etcd().Txn(context.Background()).Then(ops[i:min(i+100, len(ops))]...).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	r := newStreamRecorder()
	startStream(t, c, "/p/", r, "")
	r.waitFor(t, "the list", func() bool { return len(r.reasons) == 1 })
	if n := len(r.state); n != listPage+7 {
		t.Fatalf("listed %d keys, want %d", n, listPage+7)
	}
}

// TestStreamListsAgainAfterCompaction: while the consumer is stuck, etcd
// moves on and is compacted past it: the stream lists again, says why,
// and the state is the current one.
func TestStreamListsAgainAfterCompaction(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	put(t, c, "/c/a", "1")
	r := newStreamRecorder()
	r.block = make(chan struct{})
	release := r.block
	startStream(t, c, "/c/", r, "")
	r.waitFor(t, "the first list", func() bool { return len(r.reasons) == 1 })
	put(t, c, "/c/b", "2")
	resp, err := c.Etcd().Delete(context.Background(), "/c/a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Etcd().Compact(context.Background(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	close(release)
	r.waitFor(t, "a list after the compaction", func() bool { return len(r.reasons) == 2 })
	if r.reasons[1] != ListCompacted || r.keys() != "/c/b" {
		t.Fatalf("second list: reason %v keys %s", r.reasons[1], r.keys())
	}
	put(t, c, "/c/c", "3")
	r.waitFor(t, "an event after the list", func() bool { return r.keys() == "/c/b,/c/c" })
}

// freeAddrs returns n distinct loopback host:ports that are free right
// now (all are held open together, so they cannot coincide).
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().String())
	}
	return out
}

// restartableEtcd runs an embedded etcd on fixed ports so it can be
// stopped and started again where clients expect it.
type restartableEtcd struct {
	t   *testing.T
	cfg etcdserver.Config
	srv *etcdserver.Server
}

func newRestartableEtcd(t *testing.T) *restartableEtcd {
	addrs := freeAddrs(t, 2)
	r := &restartableEtcd{t: t, cfg: etcdserver.Config{Dir: t.TempDir(), ClientAddr: addrs[0], PeerAddr: addrs[1], NoFsync: true}}
	r.start()
	t.Cleanup(func() {
		if r.srv != nil {
			r.srv.Close()
		}
	})
	return r
}

func (r *restartableEtcd) start() {
	r.t.Helper()
	s, err := etcdserver.Start(context.Background(), r.cfg)
	if err != nil {
		r.t.Fatalf("start etcd: %v", err)
	}
	r.srv = s
}

func (r *restartableEtcd) stop() {
	r.srv.Close()
	r.srv = nil
}

// TestStreamResumesAfterEtcdRestart: etcd restarts with its data; the
// stream resumes from its revision without listing, and nothing is lost.
// Not parallel: the restart reuses fixed ports.
func TestStreamResumesAfterEtcdRestart(t *testing.T) {
	e := newRestartableEtcd(t)
	c := connect(t, Config{Endpoints: e.srv.Endpoints, RequestTimeout: time.Second})
	put(t, c, "/r/probe", "id")
	r := newStreamRecorder()
	startStream(t, c, "/r/", r, "/r/probe")
	r.waitFor(t, "the list", func() bool { return len(r.reasons) == 1 })
	put(t, c, "/r/n1", "1")
	r.waitFor(t, "n1", func() bool { return r.state["/r/n1"] == "1" })

	e.stop()
	e.start()
	put(t, c, "/r/n2", "2")
	r.waitFor(t, "n2 after the restart", func() bool { return r.state["/r/n2"] == "2" && r.resumes >= 1 })
	if len(r.reasons) != 1 {
		t.Fatalf("the stream listed again (%v) where it could resume", r.reasons)
	}
}

// TestStreamListsAgainAfterEtcdCameBackEmpty: after a restart with other
// data (a restored backup, a wiped member) the old revision means
// nothing; the stream notices and lists.
func TestStreamListsAgainAfterEtcdCameBackEmpty(t *testing.T) {
	e := newRestartableEtcd(t)
	c := connect(t, Config{Endpoints: e.srv.Endpoints, RequestTimeout: time.Second})
	for _, k := range []string{"n1", "n2", "n3", "n4", "n5"} {
		put(t, c, "/e/"+k, "x")
	}
	r := newStreamRecorder()
	startStream(t, c, "/e/", r, "")
	r.waitFor(t, "the list", func() bool { return len(r.state) == 5 })

	e.stop()
	e.cfg.Dir = t.TempDir()
	e.start()
	put(t, c, "/e/fresh", "y")
	r.waitFor(t, "a list of the new data", func() bool { return r.keys() == "/e/fresh" })
	if got := r.reasons[len(r.reasons)-1]; got != ListRolledBack {
		t.Fatalf("list reason %v, want %v", got, ListRolledBack)
	}
}

// TestStreamListsOnlyItsParts: with ListPrefixes a list reads those
// parts of the range at one revision and nothing else, while the watch
// still delivers every change of the whole range.
func TestStreamListsOnlyItsParts(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	for _, k := range []string{"/s/a/1", "/s/a/2", "/s/b/1", "/s/c/1", "/s/c/2"} {
		put(t, c, k, "1")
	}
	r := newStreamRecorder()
	startStreamWith(t, c, "/s/", r, StreamOptions{ListPrefixes: []string{"/s/a/", "/s/c/"}})
	r.waitFor(t, "the list of a and c", func() bool { return len(r.reasons) == 1 })
	r.mu.Lock()
	got := r.keys()
	r.mu.Unlock()
	if got != "/s/a/1,/s/a/2,/s/c/1,/s/c/2" {
		t.Fatalf("listed %s, want a's and c's keys only", got)
	}
	put(t, c, "/s/b/2", "1")
	r.waitFor(t, "the change under b through the watch", func() bool { _, ok := r.state["/s/b/2"]; return ok })
}

// TestStreamListPrefixOutsideRange: a part outside the range is an
// error that names it, not a silent empty list.
func TestStreamListPrefixOutsideRange(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	_, _, _, err := c.listRanges(context.Background(), "/s/", []string{"/t/"})
	if err == nil || !strings.Contains(err.Error(), `"/t/"`) {
		t.Fatalf("listing /t/ under /s/: %v, want an error naming it", err)
	}
}

// TestListRereadsAMissedPage: a page at the list's revision that etcd
// does not answer in time is read again, from the same key at the same
// revision, and the list completes; a missed first page (no revision
// yet) fails the list as before. Not parallel: it swaps readPage.
func TestListRereadsAMissedPage(t *testing.T) {
	c, _ := newTestClient(t)
	for i := range 7 {
		put(t, c, fmt.Sprintf("/m/k%d", i), "1")
	}
	defer func(n int) { listPageSize = n }(listPageSize)
	listPageSize = 3
	type call struct {
		key string
		rev int64
	}
	var calls []call
	missed := false
	readPage = func(c *Client, ctx context.Context, key, end string, rev int64) (*clientv3.GetResponse, error) {
		calls = append(calls, call{key, rev})
		if rev != 0 && !missed {
			missed = true
			return nil, context.DeadlineExceeded
		}
		return c.listPage(ctx, key, end, rev)
	}
	defer func() { readPage = (*Client).listPage }()
	kvs, rev, _, err := c.listRanges(context.Background(), "/m/", nil)
	if err != nil {
		t.Fatalf("list with one missed page: %v", err)
	}
	if len(kvs) != 7 {
		t.Fatalf("listed %d keys, want 7", len(kvs))
	}
	if len(calls) != 4 || calls[1] != calls[2] || calls[1].rev != rev {
		t.Fatalf("page reads %+v: want the missed page read again at the same key and revision %d", calls, rev)
	}
	readPage = func(*Client, context.Context, string, string, int64) (*clientv3.GetResponse, error) {
		return nil, context.DeadlineExceeded
	}
	if _, _, _, err := c.listRanges(context.Background(), "/m/", nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a missed first page: %v, want ErrUnavailable", err)
	}
}
