package listcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/internal/testenv"
)

// TestChangesKeepTheirValuesOffTheHeap: 8 MiB of changed values (2,000
// endpoints of 4 KiB) held between two writes leave less than 1 MiB on
// the heap (their keys and revisions), no file in the cache's
// directory, and are written whole and in order by the next write.
func TestChangesKeepTheirValuesOffTheHeap(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache")
	c, _ := New(Options{Path: path})
	c.Load(prefix, parts, probeKey)
	list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2), kv(epPart+"p0001", "old", 3)}, 10, 1)
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	const n, size = 2000, 4 << 10
	valueOf := func(i int) string { return fmt.Sprintf("%06d", i) + strings.Repeat("v", size-6) }
	var ms runtime.MemStats
	live := func() uint64 { runtime.GC(); runtime.ReadMemStats(&ms); return ms.HeapAlloc }
	before := live()
	for i := range n {
		// One event a call, as the watch delivers them: nothing of the
		// event is kept once Changed returns.
		c.Changed([]*clientv3.Event{putEv(fmt.Sprintf("%sp%04d", epPart, i), valueOf(i), int64(11+i))}, int64(11+i))
	}
	after := live()
	if grown := int64(after) - int64(before); grown > 1<<20 {
		t.Fatalf("8 MiB of changes grew the live heap by %d bytes, want < 1 MiB", grown)
	} else {
		t.Logf("8 MiB of changes grew the live heap by %d bytes", grown)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("files in the cache's directory while changes are kept: %v (want only the cache)", ents)
	}
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c2, _ := New(Options{Path: path})
	cl, ok := c2.Load(prefix, parts, probeKey)
	if !ok || cl.Revision != 11+n-1 {
		t.Fatalf("the written cache: loaded %v at revision %d, want %d", ok, cl.Revision, 11+n-1)
	}
	kvs := loaded(t, cl)
	if len(kvs) != n+1 {
		t.Fatalf("%d keys written, want %d", len(kvs), n+1)
	}
	for i, kv := range kvs[1:] {
		if string(kv.Value) != valueOf(i) || kv.ModRevision != int64(11+i) {
			t.Fatalf("%s: value %.10q... at %d, want %.10q... at %d", kv.Key, kv.Value, kv.ModRevision, valueOf(i), 11+i)
		}
	}
}

// TestFailedWriteKeepsChangesValues: a write cut short gives its changes
// back with their values (copied to the new journal), the changes that
// came meanwhile winning, and the next write has them all.
func TestFailedWriteKeepsChangesValues(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	c, _ := New(Options{Path: path, WriteRate: 1 << 20})
	c.Load(prefix, parts, probeKey)
	var base []*mvccpb.KeyValue
	big := strings.Repeat("b", 10<<10)
	for i := range 250 { // 2.5 MiB: the paced write takes 2.5 s
		base = append(base, kv(fmt.Sprintf("%sp%04d", epPart, i), big, 3))
	}
	list(c, base, 10, 1)
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"a", "a1", 11), putEv(epPart+"b", "b1", 12), delEv(epPart+"p0003", 13)}, 13)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.save(ctx, true) }()
	// The write has taken the changes when none are pending.
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() string {
		c.mu.Lock()
		defer c.mu.Unlock()
		if n := len(c.changes.byKey); n != 0 {
			return fmt.Sprintf("the write did not take the changes: %d pending", n)
		}
		return ""
	})
	// Changes while the write runs: b replaced, c new.
	c.Changed([]*clientv3.Event{putEv(epPart+"b", "b2", 14), putEv(epPart+"c", "c1", 15)}, 15)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a paced write of 2.5 MiB at 1 MiB/s was not cut short by its cancel")
	}
	if err := c.save(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c2, _ := New(Options{Path: path})
	cl, ok := c2.Load(prefix, parts, probeKey)
	if !ok || cl.Revision != 15 {
		t.Fatalf("loaded %v at %d, want at 15", ok, cl.Revision)
	}
	got := map[string]string{}
	for _, kv := range loaded(t, cl) {
		got[strings.TrimPrefix(string(kv.Key), epPart)] = string(kv.Value)
	}
	if got["a"] != "a1" || got["b"] != "b2" || got["c"] != "c1" || len(got) != 249+3 {
		t.Fatalf("after the failed write: a=%q b=%q c=%q, %d endpoints; want a1, b2, c1, 252", got["a"], got["b"], got["c"], len(got))
	}
	if _, ok := got["p0003"]; ok {
		t.Fatal("the deleted endpoint p0003 is in the cache")
	}
}

// TestJournalOfOneKeyWritesEarly: one key changed again and again keeps
// few bytes of changes but a growing journal; past 4 times MaxChanges
// the cache asks for a write, which empties it.
func TestJournalOfOneKeyWritesEarly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache")
	c, _ := New(Options{Path: path, MaxChanges: 64 << 10})
	c.Load(prefix, parts, probeKey)
	list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2)}, 10, 1)
	<-c.kick // the list's own write
	val := strings.Repeat("v", 1<<10)
	for i := range 255 { // 255 KiB of journal, under 4 x 64 KiB
		c.Changed([]*clientv3.Event{putEv(epPart+"a", val, int64(11+i))}, int64(11+i))
	}
	select {
	case <-c.kick:
		t.Fatal("a write asked for under 4 x MaxChanges of journal")
	default:
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"a", val, 300), putEv(epPart+"a", val, 301)}, 301)
	select {
	case <-c.kick:
	default:
		t.Fatalf("no write asked for with %d bytes of journal (MaxChanges 64 KiB)", c.changes.journalBytes())
	}
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if b := c.changes.journalBytes(); b != 0 {
		t.Fatalf("%d bytes of journal after the write", b)
	}
}
