package datastore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/etcdserver"
)

// recorder is a Handler that queues every call for the test to inspect.
type recorder struct{ ch chan any }

func newRecorder() *recorder { return &recorder{ch: make(chan any, 10000)} }

func (r *recorder) OnSnapshot(s Snapshot) { r.ch <- s }
func (r *recorder) OnEvent(e Event)       { r.ch <- e }

func (r *recorder) next(t *testing.T) any {
	t.Helper()
	select {
	case v := <-r.ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatal("timed out waiting for the syncer")
		return nil
	}
}

func (r *recorder) snapshot(t *testing.T) Snapshot {
	t.Helper()
	v := r.next(t)
	s, ok := v.(Snapshot)
	if !ok {
		t.Fatalf("want a Snapshot, got %+v", v)
	}
	return s
}

func (r *recorder) event(t *testing.T) Event {
	t.Helper()
	v := r.next(t)
	e, ok := v.(Event)
	if !ok {
		t.Fatalf("want an Event, got %+v", v)
	}
	return e
}

// state is what a consumer of the syncer would believe: "Kind/name" to
// ResourceVersion, rebuilt by each snapshot and patched by events.
type state map[string]string

func (s state) apply(v any) {
	switch v := v.(type) {
	case Snapshot:
		clear(s)
		for _, rs := range v.Resources {
			for _, r := range rs {
				s[string(r.GetKind())+"/"+r.Meta().Name] = r.Meta().ResourceVersion
			}
		}
	case Event:
		key := string(v.Kind) + "/" + v.Name
		if v.Type == EventDelete {
			delete(s, key)
		} else {
			s[key] = v.Resource.Meta().ResourceVersion
		}
	}
}

// startSync runs c.Sync in the background until the test ends, and checks
// that it then returns the context's error.
func startSync(t *testing.T, c *Client, kinds []api.Kind, h Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Sync(ctx, kinds, h) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Sync returned %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Sync did not return after its context was cancelled")
		}
	})
}

func rev(t *testing.T, r api.Resource) int64 {
	t.Helper()
	n, err := strconv.ParseInt(r.Meta().ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSyncSnapshotThenEvents(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)

	poolA, err := c.Create(ctx, newPool("a", "10.1.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	node1, err := c.Create(ctx, newNode("n1", nil))
	if err != nil {
		t.Fatal(err)
	}
	peer := &api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{PeerIP: "10.0.0.1", ASNumber: 65001}}
	if _, err := c.Create(ctx, peer); err != nil {
		t.Fatal(err)
	}
	// Keys that are not resources of a synced kind must never show up.
	for _, k := range []string{KeyPrefix + "ipam/blocks/10.1.0.0-26", "/other/nodes/x", KeyPrefix + "nodes/a/b"} {
		if _, err := c.Etcd().Put(ctx, k, "{}"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Etcd().Put(ctx, Key(api.KindNode, "corrupt"), "{not json"); err != nil {
		t.Fatal(err)
	}

	rec := newRecorder()
	kinds := []api.Kind{api.KindIPPool, api.KindNode, api.KindBGPConfiguration}
	startSync(t, c, kinds, rec)

	snap := rec.snapshot(t)
	if len(snap.Resources) != len(kinds) {
		t.Errorf("snapshot must have an entry per synced kind (and only those): %v", snap.Resources)
	}
	if _, ok := snap.Resources[api.KindBGPConfiguration]; !ok {
		t.Error("a synced kind with no objects must still be in the snapshot")
	}
	if p := snap.Resources[api.KindIPPool]; len(p) != 1 || p[0].Meta().Name != "a" || p[0].Meta().ResourceVersion != poolA.Meta().ResourceVersion {
		t.Errorf("snapshot pools: %v", p)
	}
	if n := snap.Resources[api.KindNode]; len(n) != 1 || n[0].Meta().Name != "n1" {
		t.Errorf("snapshot nodes (corrupt and nested keys skipped): %v", n)
	}
	if snap.Revision < rev(t, node1) {
		t.Errorf("snapshot revision %d older than its contents", snap.Revision)
	}

	// Changes, interleaved with writes the syncer must ignore.
	var wantRevs []int64
	poolB, err := c.Create(ctx, newPool("b", "10.2.0.0/16"))
	if err != nil {
		t.Fatal(err)
	}
	wantRevs = append(wantRevs, rev(t, poolB))
	if _, err := c.Etcd().Put(ctx, KeyPrefix+"ipam/handles/h1", "x"); err != nil {
		t.Fatal(err)
	}
	n1 := node1.(*api.Node)
	n1.Metadata.Labels = map[string]string{"rack": "r2"}
	upd, err := c.Update(ctx, n1)
	if err != nil {
		t.Fatal(err)
	}
	wantRevs = append(wantRevs, rev(t, upd))
	if _, err := c.Create(ctx, &api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor2"}, Spec: api.BGPPeerSpec{PeerIP: "10.0.0.2", ASNumber: 65001}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, api.KindIPPool, "a", ""); err != nil {
		t.Fatal(err)
	}
	wantRevs = append(wantRevs, 0) // a delete's revision is checked for order only
	node2, err := c.Create(ctx, newNode("n2", nil))
	if err != nil {
		t.Fatal(err)
	}
	wantRevs = append(wantRevs, rev(t, node2))
	if err := c.Delete(ctx, api.KindNode, "n1", ""); err != nil {
		t.Fatal(err)
	}
	wantRevs = append(wantRevs, 0)

	want := []struct {
		typ  EventType
		kind api.Kind
		name string
	}{
		{EventSet, api.KindIPPool, "b"},
		{EventSet, api.KindNode, "n1"},
		{EventDelete, api.KindIPPool, "a"},
		{EventSet, api.KindNode, "n2"},
		{EventDelete, api.KindNode, "n1"},
	}
	// Each kind is its own watch: events of one kind arrive in revision
	// order, kinds may interleave. Match each event to the next expected
	// one of its kind.
	got := make([]Event, len(want))
	for n := range want {
		e := rec.event(t)
		i := -1
		for j, w := range want {
			if got[j].Kind == "" && w.kind == e.Kind {
				i = j
				break
			}
		}
		if i < 0 {
			t.Fatalf("event %d: unexpected %v %s/%s", n, e.Type, e.Kind, e.Name)
		}
		got[i] = e
	}
	last := map[api.Kind]int64{}
	for i, w := range want {
		e := got[i]
		if e.Type != w.typ || e.Kind != w.kind || e.Name != w.name {
			t.Fatalf("event %d: got %v %s/%s, want %v %s/%s", i, e.Type, e.Kind, e.Name, w.typ, w.kind, w.name)
		}
		if e.Revision <= max(last[e.Kind], snap.Revision) {
			t.Errorf("event %d: revision %d not after %d", i, e.Revision, max(last[e.Kind], snap.Revision))
		}
		last[e.Kind] = e.Revision
		if wantRevs[i] != 0 && e.Revision != wantRevs[i] {
			t.Errorf("event %d: revision %d, want the write's %d", i, e.Revision, wantRevs[i])
		}
		switch e.Type {
		case EventDelete:
			if e.Resource != nil {
				t.Errorf("event %d: delete carries a resource", i)
			}
		case EventSet:
			if e.Resource == nil || e.Resource.Meta().Name != w.name || e.Resource.Meta().ResourceVersion != strconv.FormatInt(e.Revision, 10) {
				t.Errorf("event %d: resource %+v does not match", i, e.Resource)
			}
		}
	}
	select {
	case v := <-rec.ch:
		t.Fatalf("unexpected extra call: %+v", v)
	case <-time.After(300 * time.Millisecond):
	}
}

// blockingRawHandler holds up its first snapshot until released, so the
// test can move etcd on and compact it before the watch starts.
type blockingRawHandler struct {
	first   chan struct{}
	release chan struct{}
	snaps   chan []string
	events  chan string
}

func newBlockingRawHandler() *blockingRawHandler {
	return &blockingRawHandler{first: make(chan struct{}), release: make(chan struct{}), snaps: make(chan []string, 100), events: make(chan string, 1000)}
}

func (b *blockingRawHandler) OnRawSnapshot(kvs []*mvccpb.KeyValue, rev int64) {
	var keys []string
	for _, kv := range kvs {
		keys = append(keys, string(kv.Key))
	}
	b.snaps <- keys
	select {
	case <-b.first:
	default:
		close(b.first)
		<-b.release
	}
}

func (b *blockingRawHandler) OnRawEvent(ev *clientv3.Event) {
	b.events <- ev.Type.String() + " " + string(ev.Kv.Key)
}

// moveOnAndCompact writes twice under prefix and compacts at the last
// revision, so a watch from before the writes can no longer start.
func moveOnAndCompact(t *testing.T, c *Client, prefix string) int64 {
	t.Helper()
	ctx := testCtx(t)
	if _, err := c.Etcd().Put(ctx, prefix+"b", "2"); err != nil {
		t.Fatal(err)
	}
	resp, err := c.Etcd().Delete(ctx, prefix+"a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Etcd().Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

func TestWatchOnceReportsCompaction(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	const prefix = "/test/"
	if _, err := c.Etcd().Put(ctx, prefix+"a", "1"); err != nil {
		t.Fatal(err)
	}
	h := newBlockingRawHandler()
	done := make(chan error, 1)
	go func() { done <- c.watchOnce(ctx, []KeyRange{{Key: prefix}}, h, nil) }()
	<-h.first
	moveOnAndCompact(t, c, prefix)
	close(h.release)
	select {
	case err := <-done:
		if !errors.Is(err, errCompacted) {
			t.Fatalf("watchOnce = %v, want errCompacted", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watchOnce did not notice the compaction")
	}
	if len(h.events) != 0 {
		t.Errorf("no events may be delivered from a compacted range, got %d", len(h.events))
	}
}

func TestWatchPrefixResyncsAfterCompaction(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	const prefix = "/test/"
	if _, err := c.Etcd().Put(ctx, prefix+"a", "1"); err != nil {
		t.Fatal(err)
	}
	h := newBlockingRawHandler()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.WatchPrefix(wctx, prefix, h) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchPrefix = %v, want context.Canceled", err)
		}
	}()

	<-h.first
	if first := <-h.snaps; len(first) != 1 || first[0] != prefix+"a" {
		t.Fatalf("first snapshot: %v", first)
	}
	moveOnAndCompact(t, c, prefix)
	close(h.release)

	select {
	case second := <-h.snaps:
		if len(second) != 1 || second[0] != prefix+"b" {
			t.Fatalf("resync snapshot must hold the full current state [%sb], got %v", prefix, second)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no resync snapshot after compaction")
	}
	if len(h.events) != 0 {
		t.Fatalf("events from the compacted range leaked: %d", len(h.events))
	}
	// And the new watch follows changes again.
	if _, err := c.Etcd().Put(ctx, prefix+"c", "3"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-h.events:
		if e != "PUT "+prefix+"c" {
			t.Fatalf("event after resync: %q", e)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event after resync")
	}
}

// blockingHandler is a typed Handler that blocks in its first snapshot.
type blockingHandler struct {
	*recorder
	first, release chan struct{}
	n              int
}

func (b *blockingHandler) OnSnapshot(s Snapshot) {
	b.recorder.OnSnapshot(s)
	if b.n++; b.n == 1 {
		close(b.first)
		<-b.release
	}
}

func TestSyncResyncsAfterCompaction(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	if _, err := c.Create(ctx, newNode("n1", nil)); err != nil {
		t.Fatal(err)
	}
	h := &blockingHandler{recorder: newRecorder(), first: make(chan struct{}), release: make(chan struct{})}
	startSync(t, c, []api.Kind{api.KindNode}, h)
	<-h.first
	if s := h.snapshot(t); len(s.Resources[api.KindNode]) != 1 {
		t.Fatalf("first snapshot: %v", s.Resources)
	}

	// While the consumer is stuck, etcd moves on and is compacted.
	n2, err := c.Create(ctx, newNode("n2", nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, api.KindNode, "n1", ""); err != nil {
		t.Fatal(err)
	}
	n3, err := c.Create(ctx, newNode("n3", nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Etcd().Compact(ctx, rev(t, n3)); err != nil {
		t.Fatal(err)
	}
	close(h.release)

	s := h.snapshot(t) // must be a snapshot: the missed events are gone
	if s.Revision < rev(t, n3) {
		t.Errorf("resync snapshot at %d, before the compaction at %d", s.Revision, rev(t, n3))
	}
	st := state{}
	st.apply(s)
	want := state{"Node/n2": n2.Meta().ResourceVersion, "Node/n3": n3.Meta().ResourceVersion}
	if len(st) != len(want) || st["Node/n2"] != want["Node/n2"] || st["Node/n3"] != want["Node/n3"] {
		t.Fatalf("resync snapshot state %v, want %v", st, want)
	}
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

// createEventually retries through the outage a restart causes.
func createEventually(t *testing.T, c *Client, res api.Resource) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Create(context.Background(), res)
		if err == nil || errors.Is(err, ErrExists) {
			return
		}
		if !errors.Is(err, ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("create %s: %v", res.Meta().Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitForState consumes syncer calls until the consumer's state equals
// want (names only) after at least minSnapshots snapshots in total.
func waitForState(t *testing.T, rec *recorder, st state, snapshots *int, minSnapshots int, want ...string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		if *snapshots >= minSnapshots && len(st) == len(want) {
			ok := true
			for _, w := range want {
				if _, has := st[w]; !has {
					ok = false
				}
			}
			if ok {
				return
			}
		}
		select {
		case v := <-rec.ch:
			if _, isSnap := v.(Snapshot); isSnap {
				*snapshots++
			}
			st.apply(v)
		case <-deadline:
			t.Fatalf("after %d snapshots state is %v, want %v", *snapshots, st, want)
		}
	}
}

// Not parallel: the restart reuses fixed ports, and no parallel test runs
// beside a sequential one, so nothing can grab them in between.
func TestSyncResyncsAfterEtcdRestart(t *testing.T) {
	e := newRestartableEtcd(t)
	c := connect(t, Config{Endpoints: e.srv.Endpoints, RequestTimeout: time.Second})
	rec := newRecorder()
	startSync(t, c, []api.Kind{api.KindNode}, rec)

	st, snapshots := state{}, 0
	waitForState(t, rec, st, &snapshots, 1)
	createEventually(t, c, newNode("n1", nil))
	waitForState(t, rec, st, &snapshots, 1, "Node/n1")

	e.stop()
	e.start()
	createEventually(t, c, newNode("n2", nil))
	// A fresh snapshot after the outage, and nothing lost.
	waitForState(t, rec, st, &snapshots, 2, "Node/n1", "Node/n2")
}

// After a restart with other data (a restored backup, a wiped member) the
// old watch revision means nothing; only a resync gives the right state.
func TestSyncResyncsAfterEtcdCameBackEmpty(t *testing.T) {
	e := newRestartableEtcd(t)
	c := connect(t, Config{Endpoints: e.srv.Endpoints, RequestTimeout: time.Second})
	rec := newRecorder()
	startSync(t, c, []api.Kind{api.KindNode}, rec)

	st, snapshots := state{}, 0
	waitForState(t, rec, st, &snapshots, 1)
	for _, n := range []string{"n1", "n2", "n3", "n4", "n5"} {
		createEventually(t, c, newNode(n, nil))
	}
	waitForState(t, rec, st, &snapshots, 1, "Node/n1", "Node/n2", "Node/n3", "Node/n4", "Node/n5")

	e.stop()
	e.cfg.Dir = t.TempDir()
	e.start()
	createEventually(t, c, newNode("fresh", nil))
	waitForState(t, rec, st, &snapshots, 2, "Node/fresh")
}
