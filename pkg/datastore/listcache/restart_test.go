package listcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
)

// The range the tests stream: two listed parts and the probe key; keys
// under handles/ are watched but never listed (as the feed's IPAM
// handles).
const (
	prefix   = "/routed/v1/"
	probeKey = "/routed/v1/clusterinformation/default"
	epPart   = "/routed/v1/workloadendpoints/"
	polPart  = "/routed/v1/globalnetworkpolicies/"
	handles  = "/routed/v1/ipam/handles/"
)

var parts = []string{probeKey, epPart, polPart}

// recorder is what a stream's handler believes: a list, then events.
type recorder struct {
	mu      sync.Mutex
	state   map[string]*mvccpb.KeyValue
	reasons []datastore.ListReason
	listRev int64
	rev     int64
}

func newRecorder() *recorder { return &recorder{state: map[string]*mvccpb.KeyValue{}} }

func (r *recorder) OnList(kvs []*mvccpb.KeyValue, rev int64, reason datastore.ListReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = map[string]*mvccpb.KeyValue{}
	for _, kv := range kvs {
		r.state[string(kv.Key)] = kv
	}
	r.reasons = append(r.reasons, reason)
	r.listRev, r.rev = rev, rev
}

func (r *recorder) OnEvents(evs []*clientv3.Event, rev int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rev = rev
	for _, ev := range evs {
		if !inParts(ev.Kv.Key, header{Prefix: prefix, Parts: parts}) {
			continue
		}
		if ev.Type == clientv3.EventTypeDelete {
			delete(r.state, string(ev.Kv.Key))
		} else {
			r.state[string(ev.Kv.Key)] = ev.Kv
		}
	}
}

// firstList waits for the first list and returns its reason, revision
// and state.
func (r *recorder) firstList(t *testing.T) (datastore.ListReason, int64, map[string]*mvccpb.KeyValue) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.reasons) == 0 {
			return "no list yet"
		}
		return ""
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reasons[0], r.listRev, r.state
}

// stoppedNode starts an etcd holding keys endpoints, runs a node with a
// cache against it until it delivered them all, and stops it.
func stoppedNode(t *testing.T, keys int) (*datastore.Client, string) {
	t.Helper()
	c := connect(t, etcdtest.Start(t).Endpoints)
	path := filepath.Join(t.TempDir(), "feed-cache")
	rev := fill(t, c, keys)
	n := startNode(t, c, path)
	n.waitRev(t, rev)
	n.stop()
	return c, path
}

// expectList waits for n's first list, fails unless it was for reason,
// and checks it is what a fresh list at its revision reads from c.
func (n *node) expectList(t *testing.T, c *datastore.Client, reason datastore.ListReason) (int64, map[string]*mvccpb.KeyValue) {
	t.Helper()
	got, rev, state := n.rec.firstList(t)
	if got != reason {
		t.Fatalf("listed for %q, want %q", got, reason)
	}
	sameState(t, state, listAt(t, c, rev))
	return rev, state
}

// node is one run of a stream with a cache, as routed runs its feed.
type node struct {
	cache  *Cache
	rec    *recorder
	cancel context.CancelFunc
	done   chan struct{}
}

// startNode streams c's range with a cache at path until stop.
func startNode(t *testing.T, c *datastore.Client, path string) *node {
	t.Helper()
	cache, err := New(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{cache: cache, rec: newRecorder(), cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Go(func() { _ = cache.Run(ctx) })
	wg.Go(func() {
		_ = c.Stream(ctx, prefix, n.rec, datastore.StreamOptions{ProbeKey: probeKey, ListPrefixes: parts, Cache: cache})
	})
	go func() { wg.Wait(); close(n.done) }()
	t.Cleanup(n.stop)
	return n
}

// stop stops the node the way SIGTERM does, and waits for its last
// write of the cache.
func (n *node) stop() {
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		panic("the stream or the cache did not stop")
	}
}

// waitRev waits until the node has delivered up to rev.
func (n *node) waitRev(t *testing.T, rev int64) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() string {
		n.rec.mu.Lock()
		defer n.rec.mu.Unlock()
		if n.rec.rev < rev {
			return fmt.Sprintf("delivered up to %d, want %d", n.rec.rev, rev)
		}
		return ""
	})
}

func put(t *testing.T, c *datastore.Client, key, val string) int64 {
	t.Helper()
	resp, err := c.Etcd().Put(context.Background(), key, val)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return resp.Header.Revision
}

func del(t *testing.T, c *datastore.Client, key string) int64 {
	t.Helper()
	resp, err := c.Etcd().Delete(context.Background(), key)
	if err != nil {
		t.Fatalf("delete %s: %v", key, err)
	}
	return resp.Header.Revision
}

func connect(t *testing.T, endpoints []string) *datastore.Client {
	t.Helper()
	c, err := datastore.New(datastore.Config{Endpoints: endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// fill writes the probe key, n endpoints, policies and handles.
func fill(t *testing.T, c *datastore.Client, n int) int64 {
	t.Helper()
	put(t, c, probeKey, `{"clusterGUID":"g1","datastoreReady":true}`)
	for i := range n {
		put(t, c, fmt.Sprintf("%snode-%d/pod-%d", epPart, i%7, i), fmt.Sprintf(`{"pod":%d,"labels":{"app":"a%d"}}`, i, i%5))
		put(t, c, fmt.Sprintf("%sh-%d", handles, i), "h")
	}
	rev := int64(0)
	for i := range 5 {
		rev = put(t, c, fmt.Sprintf("%spol-%d", polPart, i), fmt.Sprintf(`{"selector":"app == 'a%d'"}`, i))
	}
	return rev
}

// listAt reads the parts as a list does, at rev.
func listAt(t *testing.T, c *datastore.Client, rev int64) map[string]*mvccpb.KeyValue {
	t.Helper()
	out := map[string]*mvccpb.KeyValue{}
	for _, p := range parts {
		resp, err := c.Etcd().Get(context.Background(), p, clientv3.WithPrefix(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("list %s at %d: %v", p, rev, err)
		}
		for _, kv := range resp.Kvs {
			out[string(kv.Key)] = kv
		}
	}
	return out
}

// sameState fails unless got is exactly want (keys, values, revisions).
func sameState(t *testing.T, got, want map[string]*mvccpb.KeyValue) {
	t.Helper()
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+k)
		case string(g.Value) != string(w.Value) || g.ModRevision != w.ModRevision || g.CreateRevision != w.CreateRevision || g.Version != w.Version:
			diffs = append(diffs, fmt.Sprintf("%s: got %q@%d, want %q@%d", k, g.Value, g.ModRevision, w.Value, w.ModRevision))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "extra "+k)
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		t.Fatalf("%d differences from a fresh list, e.g. %s", len(diffs), strings.Join(diffs[:min(5, len(diffs))], "; "))
	}
}

func currentRev(t *testing.T, c *datastore.Client) int64 {
	t.Helper()
	resp, err := c.Etcd().Get(context.Background(), "nothing", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestRestartFromCacheAfterChanges: a node stopped (its cache written
// on the way out) misses creations, deletions and a policy edit; started
// again, its first list comes from the cache, at no older a revision
// than etcd's when it started, and is exactly what a fresh list at that
// revision reads. It then follows the watch as before.
func TestRestartFromCacheAfterChanges(t *testing.T) {
	t.Parallel()
	s := etcdtest.Start(t)
	c := connect(t, s.Endpoints)
	path := filepath.Join(t.TempDir(), "feed-cache")
	rev := fill(t, c, 300)

	n1 := startNode(t, c, path)
	n1.expectList(t, c, datastore.ListStart)
	n1.waitRev(t, rev)
	// Changes while it runs end up in the file written on the way out.
	put(t, c, epPart+"node-1/running", "r")
	n1.waitRev(t, del(t, c, epPart+"node-0/pod-0"))
	n1.stop()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("no cache written on the way out: %v", err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("cache mode %o, want 600", st.Mode().Perm())
	}

	// While it is down: creations, deletions, a policy edit, handles.
	for i := range 40 {
		put(t, c, fmt.Sprintf("%snode-9/new-%d", epPart, i), "new")
		put(t, c, fmt.Sprintf("%sh-new-%d", handles, i), "h")
	}
	for i := 1; i < 30; i++ {
		del(t, c, fmt.Sprintf("%snode-%d/pod-%d", epPart, i%7, i))
	}
	put(t, c, polPart+"pol-2", `{"selector":"app == 'edited'"}`)
	atStart := currentRev(t, c)

	n2 := startNode(t, c, path)
	if listRev, _ := n2.expectList(t, c, datastore.ListCache); listRev < atStart {
		t.Fatalf("the list from the cache is at %d, older than etcd's %d at start", listRev, atStart)
	}
	if got := counter(t, n2.cache.m.restores); got != 1 {
		t.Fatalf("restores %v, want 1", got)
	}
	// It follows on from there, and writes what it follows.
	n2.waitRev(t, put(t, c, epPart+"node-2/after", "a"))
	n2.stop()
	_, state := startNode(t, c, path).expectList(t, c, datastore.ListCache)
	if _, ok := state[epPart+"node-2/after"]; !ok {
		t.Fatal("the change followed after the first restart is not in the cache")
	}
}

// TestRestartCatchesUpOutsideTheList: when the last writes before the
// restart are outside the listed parts, only a progress notification
// says the watch has caught up; the restart still delivers promptly.
func TestRestartCatchesUpOutsideTheList(t *testing.T) {
	t.Parallel()
	c, path := stoppedNode(t, 20)
	put(t, c, epPart+"node-1/down", "d")
	for i := range 5 {
		put(t, c, fmt.Sprintf("%sh-late-%d", handles, i), "h")
	}
	atStart := currentRev(t, c)
	start := time.Now()
	if listRev, _ := startNode(t, c, path).expectList(t, c, datastore.ListCache); listRev < atStart {
		t.Fatalf("restart listed at %d, want >= %d", listRev, atStart)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("caught up in %s: waited for the periodic progress notification", d)
	}
}

// TestCompactedCacheFallsBackToList: a cache whose revision etcd
// compacted away is not used: the node lists, and says why.
func TestCompactedCacheFallsBackToList(t *testing.T) {
	t.Parallel()
	c, path := stoppedNode(t, 50)
	del(t, c, epPart+"node-3/pod-3")
	last := put(t, c, polPart+"pol-1", "edited")
	if _, err := c.Etcd().Compact(context.Background(), last); err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, c, path)
	n2.expectList(t, c, datastore.ListCompacted)
	if got := counter(t, n2.cache.m.fallbacks.WithLabelValues(string(datastore.ListCompacted))); got != 1 {
		t.Fatalf("fallbacks{compacted} %v, want 1", got)
	}
	if got := counter(t, n2.cache.m.restores); got != 0 {
		t.Fatalf("restores %v, want 0", got)
	}
}

// TestCacheFromAnotherClusterFallsBackToList: a cache written against
// one etcd cluster is not used against another.
func TestCacheFromAnotherClusterFallsBackToList(t *testing.T) {
	t.Parallel()
	a, b := etcdtest.Start(t), etcdtest.Start(t)
	ca, cb := connect(t, a.Endpoints), connect(t, b.Endpoints)
	path := filepath.Join(t.TempDir(), "feed-cache")
	rev := fill(t, ca, 30)
	n1 := startNode(t, ca, path)
	n1.waitRev(t, rev)
	n1.stop()
	// b has more history than a, so only the cluster ID tells them apart.
	fill(t, cb, 60)
	put(t, cb, epPart+"only-in-b", "b")
	startNode(t, cb, path).expectList(t, cb, datastore.ListClusterChanged)
}

// TestBrokenCacheFallsBackToList: a truncated file, a flipped byte, a
// file others may write, one written for other parts and a symlink are
// each discarded, with their reason; the node lists, and replaces the
// file with a good one.
func TestBrokenCacheFallsBackToList(t *testing.T) {
	t.Parallel()
	c, good := stoppedNode(t, 40)
	dir := t.TempDir()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	flipped := slices.Clone(data)
	flipped[len(flipped)/2] ^= 0x40
	otherParts := rewriteFile(t, data, func(h *header) { h.Parts = []string{probeKey, epPart} }, nil)
	cases := []struct {
		name, reason string
		data         []byte
		mode         os.FileMode
	}{
		{"truncated", "corrupt", data[:len(data)*2/3], 0o600},
		{"truncated-to-header", "corrupt", data[:20], 0o600},
		{"flipped", "corrupt", flipped, 0o600},
		{"world-writable", "not private", data, 0o666},
		{"other-parts", "other range", otherParts, 0o600},
		{"empty", "corrupt", nil, 0o600},
		{"symlink", "unreadable", nil, 0},
	}
	for _, tc := range cases {
		path := filepath.Join(dir, tc.name)
		if tc.name == "symlink" {
			// A link to a good cache is still refused: not followed.
			if err := os.Symlink(good, path); err != nil {
				t.Fatal(err)
			}
		} else {
			if err := os.WriteFile(path, tc.data, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
		}
		n := startNode(t, c, path)
		n.expectList(t, c, datastore.ListStart)
		if got := counter(t, n.cache.m.fallbacks.WithLabelValues(tc.reason)); got != 1 {
			t.Fatalf("%s: fallbacks{%s} %v, want 1", tc.name, tc.reason, got)
		}
		n.stop()
		// The list replaced it with a good, private file.
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: after the list: %v, mode %v", tc.name, err, st.Mode())
		}
		if _, err := openAndReadAll(path); err != nil {
			t.Fatalf("%s: the file written after the list does not read: %v", tc.name, err)
		}
	}
}

// rewriteFile returns a well-formed file (checksum right) with data's
// header and records changed by edit and editKV (nil: unchanged).
func rewriteFile(t *testing.T, data []byte, edit func(*header), editKV func(*mvccpb.KeyValue)) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "src")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := openFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h := f.h
	if edit != nil {
		edit(&h)
	}
	var kvs []*mvccpb.KeyValue
	for f.next() {
		kv := f.kv
		if editKV != nil {
			editKV(&kv)
		}
		kvs = append(kvs, &kv)
	}
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	fw, err := newWriter(&buf, h)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range kvs {
		if err := fw.record(kv); err != nil {
			t.Fatal(err)
		}
	}
	if err := fw.finish(); err != nil {
		t.Fatal(err)
	}
	return []byte(buf.String())
}

func openAndReadAll(path string) (int, error) {
	f, err := openFile(path)
	if err != nil {
		return 0, err
	}
	n := 0
	for f.next() {
		n++
	}
	return n, f.close()
}

// counter reads a counter's value.
func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestCacheWithAnotherHistoryFallsBackToList: a well-formed cache that
// claims a revision etcd has not reached (etcd restored from an older
// backup), or whose cluster identity key differs from etcd's at a
// revision the cache has seen, is not used.
func TestCacheWithAnotherHistoryFallsBackToList(t *testing.T) {
	t.Parallel()
	c, path := stoppedNode(t, 20)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		reason datastore.ListReason
		data   []byte
	}{
		{datastore.ListRolledBack, rewriteFile(t, data, func(h *header) { h.Revision += 1000 }, nil)},
		{datastore.ListDiverged, rewriteFile(t, data, nil, func(kv *mvccpb.KeyValue) {
			if string(kv.Key) == probeKey {
				kv.ModRevision, kv.Value = 1, []byte(`{"clusterGUID":"other"}`)
			}
		})},
	} {
		if err := os.WriteFile(path, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		n := startNode(t, c, path)
		n.expectList(t, c, tc.reason)
		if got := counter(t, n.cache.m.fallbacks.WithLabelValues(string(tc.reason))); got != 1 {
			t.Fatalf("fallbacks{%s} %v, want 1", tc.reason, got)
		}
		n.stop()
	}
}
