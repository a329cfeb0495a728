package listcache

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

func kv(key, val string, rev int64) *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), CreateRevision: rev, ModRevision: rev, Version: 1}
}

func putEv(key, val string, rev int64) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypePut, Kv: kv(key, val, rev)}
}

func delEv(key string, rev int64) *clientv3.Event {
	return &clientv3.Event{Type: clientv3.EventTypeDelete, Kv: &mvccpb.KeyValue{Key: []byte(key), ModRevision: rev}}
}

// list hands c kvs as a stream's list at rev: in key order, in pages of
// two.
func list(c *Cache, kvs []*mvccpb.KeyValue, rev int64, cluster uint64) {
	kvs = slices.Clone(kvs)
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return bytes.Compare(a.Key, b.Key) })
	c.ListStarted(rev, cluster)
	for i := 0; i < len(kvs); i += 2 {
		c.ListPage(kvs[i:min(i+2, len(kvs))])
	}
	c.Listed(rev, cluster)
}

// loaded reads a loaded copy whole, and closes it.
func loaded(t *testing.T, cl datastore.CachedList) []*mvccpb.KeyValue {
	t.Helper()
	defer cl.Close()
	var kvs []*mvccpb.KeyValue
	for kv, err := range cl.Read {
		if err != nil {
			t.Fatalf("reading the loaded cache: %v", err)
		}
		kvs = append(kvs, kv)
	}
	if len(kvs) != cl.Keys {
		t.Fatalf("the loaded cache said %d keys, read %d", cl.Keys, len(kvs))
	}
	return kvs
}

// render is a list as "key=value@rev" lines in order.
func renderKVs(kvs []*mvccpb.KeyValue) string {
	s := ""
	for _, kv := range kvs {
		s += fmt.Sprintf("%s=%s@%d\n", kv.Key, kv.Value, kv.ModRevision)
	}
	return s
}

// TestSaveMergesChangesIntoTheFile: a list written as the base, then
// changes (new keys before, between and after the base's, replaced and
// deleted keys, keys outside the parts) merged into the file in two
// writes, read back as exactly the range at the last revision, in key
// order; no temporary file stays behind.
func TestSaveMergesChangesIntoTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache")
	c, err := New(Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Load(prefix, parts, probeKey); ok {
		t.Fatal("loaded a cache that does not exist")
	}
	list(c, []*mvccpb.KeyValue{
		kv(epPart+"b", "b1", 3), kv(probeKey, "ci", 2), kv(epPart+"d", "d1", 4), kv(polPart+"p", "p1", 5),
	}, 10, 77)
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"a", "a1", 11), putEv(epPart+"b", "b2", 12), delEv(epPart+"d", 13),
		putEv(handles+"x", "h", 14)}, 14)
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"c", "c1", 15), putEv(epPart+"z", "z1", 16), delEv(epPart+"a", 17),
		putEv(polPart+"p", "p2", 18)}, 20)
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c2, _ := New(Options{Path: path})
	cl, ok := c2.Load(prefix, parts, probeKey)
	if !ok {
		t.Fatal("the written cache does not load")
	}
	// Key order, whatever the parts' order: /routed/v1/c..., g..., w...
	want := probeKey + "=ci@2\n" + polPart + "p=p2@18\n" + epPart + "b=b2@12\n" + epPart + "c=c1@15\n" + epPart + "z=z1@16\n"
	if got := renderKVs(loaded(t, cl)); got != want || cl.Revision != 20 || cl.ClusterID != 77 || cl.ProbeRev != 2 {
		t.Fatalf("loaded at %d of %d:\n%s\nwant at 20 of 77:\n%s", cl.Revision, cl.ClusterID, got, want)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("files left in the directory: %v", ents)
	}
}

// TestDiscardedCacheWritesNothing: after the stream discarded the
// loaded file, or found the history it followed gone, neither the
// changes held nor later ones are merged into the file (they belong to
// no base) until the next list.
func TestDiscardedCacheWritesNothing(t *testing.T) {
	for name, drop := range map[string]func(*Cache){
		"discarded":    func(c *Cache) { c.Discarded(datastore.ListCompacted) },
		"history lost": func(c *Cache) { c.HistoryLost(datastore.ListRolledBack) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache")
			c, _ := New(Options{Path: path})
			c.Load(prefix, parts, probeKey)
			list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2)}, 5, 1)
			if err := c.save(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(path)
			c.Changed([]*clientv3.Event{putEv(epPart+"a", "a", 8)}, 8)
			drop(c)
			c.Changed([]*clientv3.Event{putEv(epPart+"b", "b", 9)}, 9)
			if err := c.save(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(path)
			if string(before) != string(after) {
				t.Fatal("changes were written after the cache was dropped")
			}
		})
	}
}

// TestStaleTemporaryFilesRemoved: a write cut short by a kill leaves a
// temporary file; the next start removes it.
func TestStaleTemporaryFilesRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".cache.tmp-123")
	if err := os.WriteFile(stale, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := New(Options{Path: filepath.Join(dir, "cache")})
	c.Load(prefix, parts, probeKey)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale temporary file still there: %v", err)
	}
}

// TestPacedWrite: a write while the node runs keeps to WriteRate; the
// write on the way out does not wait, and one cut short by the node
// stopping loses nothing (the last write takes it).
func TestPacedWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	c, _ := New(Options{Path: path, WriteRate: 1 << 20})
	c.Load(prefix, parts, probeKey)
	var base []*mvccpb.KeyValue
	val := string(make([]byte, 10<<10))
	for i := range 250 { // 2.5 MiB
		base = append(base, kv(fmt.Sprintf("%sp%04d", epPart, i), val, 3))
	}
	list(c, base, 10, 1)
	if err := c.save(context.Background(), true); err != nil { // puts the list in place
		t.Fatal(err)
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"new0", "n", 11)}, 11)
	start := time.Now()
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("2.5 MiB at 1 MiB/s written in %s", d)
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"new", "n", 12)}, 12)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.save(ctx, true); err == nil {
		t.Fatal("a paced write of 2.5 MiB finished in 300 ms")
	}
	start = time.Now()
	if err := c.save(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the unpaced write took %s", d)
	}
	c2, _ := New(Options{Path: path})
	cl, ok := c2.Load(prefix, parts, probeKey)
	if !ok || cl.Revision != 12 || cl.Keys != 252 || len(loaded(t, cl)) != 252 {
		t.Fatalf("after the cut-short write: loaded %v at %d with %d keys, want 252 at 12", ok, cl.Revision, cl.Keys)
	}
}
