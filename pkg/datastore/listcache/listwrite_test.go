package listcache

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// dirFiles names the files in dir.
func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestListOutOfOrderLeavesNoCache: a list whose pages come out of key
// order is not written (a file must merge in one pass): no base, no
// file, no temporary file; the next list in order is.
func TestListOutOfOrderLeavesNoCache(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache")
	c, _ := New(Options{Path: path})
	c.Load(prefix, parts, probeKey)
	c.ListStarted(10, 1)
	c.ListPage([]*mvccpb.KeyValue{kv(epPart+"b", "b", 3)})
	c.ListPage([]*mvccpb.KeyValue{kv(epPart+"a", "a", 3)})
	c.Listed(10, 1)
	if err := c.save(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if files := dirFiles(t, dir); len(files) != 0 {
		t.Fatalf("files after a list out of order: %v", files)
	}
	list(c, []*mvccpb.KeyValue{kv(epPart+"a", "a", 3), kv(epPart+"b", "b", 3)}, 11, 1)
	if err := c.save(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	c2, _ := New(Options{Path: path})
	cl, ok := c2.Load(prefix, parts, probeKey)
	if !ok || cl.Revision != 11 || len(loaded(t, cl)) != 2 {
		t.Fatalf("after a list in order: loaded %v at %d, want 2 keys at 11", ok, cl.Revision)
	}
}

// TestStopDropsAListCutShort: the node stopping in the middle of a list
// leaves the cache file as it was and no temporary file, and a list
// after the stop writes nothing.
func TestStopDropsAListCutShort(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache")
	c, _ := New(Options{Path: path})
	c.Load(prefix, parts, probeKey)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	c.ListStarted(10, 1)
	c.ListPage([]*mvccpb.KeyValue{kv(epPart+"a", "a", 3)})
	if files := dirFiles(t, dir); len(files) != 1 {
		t.Fatalf("files while listing: %v, want the list's temporary file", files)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	c.ListPage([]*mvccpb.KeyValue{kv(epPart+"b", "b", 3)})
	c.Listed(10, 1)
	c.ListStarted(12, 1)
	if files := dirFiles(t, dir); len(files) != 0 {
		t.Fatalf("files after the stop: %v", files)
	}
}
