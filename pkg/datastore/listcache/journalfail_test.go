package listcache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// readOnlyJournal makes c's journal refuse writes (EBADF) while its
// values still read back: its file is swapped for a read-only
// descriptor of the same unlinked file.
func readOnlyJournal(t *testing.T, c *Cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.changes.j
	if j == nil {
		t.Fatal("no journal yet")
	}
	ro, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", j.f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	j.f.Close()
	j.f = ro
}

// listedAt10 is a cache at revision 10 on disk with p00=old.
func listedAt10(t *testing.T, maxChanges int) (*Cache, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache")
	c, _ := New(Options{Path: path, MaxChanges: maxChanges, WriteRate: -1})
	c.Load(prefix, parts, probeKey)
	list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2), kv(epPart+"p00", "old", 3)}, 10, 1)
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return c, path
}

func bigValue(i, rev int) string { return fmt.Sprintf("%02d@%d:", i, rev) + strings.Repeat("v", 2<<10) }

// TestJournalThatCannotBeWrittenHoldsValues: values already in the
// journal's file and in its buffer when a write to it fails are all
// kept (read back onto the heap), as are the changes after, and the
// next write has them.
func TestJournalThatCannotBeWrittenHoldsValues(t *testing.T) {
	c, path := listedAt10(t, 0)
	want := map[string]string{"clusterinformation/default": "ci", "workloadendpoints/p00": "old"}
	rev := 10
	change := func(i int) {
		rev++
		k := fmt.Sprintf("p%02d", i)
		c.Changed([]*clientv3.Event{putEv(epPart+k, bigValue(i, rev), int64(rev))}, int64(rev))
		want["workloadendpoints/"+k] = bigValue(i, rev)
	}
	for i := range 20 { // 40 KiB: the first 32 KiB in the file
		change(i)
	}
	readOnlyJournal(t, c)
	for i := range 30 { // p00-p19 again, p20-p29 new
		change(i)
	}
	c.mu.Lock()
	held, valid := len(c.changes.held), c.valid
	c.mu.Unlock()
	if !valid || held != 30 {
		t.Fatalf("after the journal failed: valid %v, %d values held in memory, want 30", valid, held)
	}
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	checkFileAt(t, path, int64(rev), want)
}

// TestJournalThatCannotBeReadStops: a journal whose values cannot be
// read back loses them: the cache stops its updates and leaves the file
// on disk as it was (fail closed), never writing it without them.
func TestJournalThatCannotBeReadStops(t *testing.T) {
	c, path := listedAt10(t, 0)
	for i := range 20 {
		c.Changed([]*clientv3.Event{putEv(epPart+fmt.Sprintf("p%02d", i), bigValue(i, 11+i), int64(11+i))}, int64(11+i))
	}
	c.mu.Lock()
	c.changes.j.f.Close() // neither writes nor reads
	c.mu.Unlock()
	for i := range 20 {
		c.Changed([]*clientv3.Event{putEv(epPart+fmt.Sprintf("q%02d", i), bigValue(i, 31+i), int64(31+i))}, int64(31+i))
	}
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	checkFileAt(t, path, 10, map[string]string{"clusterinformation/default": "ci", "workloadendpoints/p00": "old"})
}

// TestHeldChangesAreBounded: while the journal cannot be written, the
// changes held in memory stop at twice MaxChanges: past it the cache
// stops its updates (until the next list) rather than grow the heap.
func TestHeldChangesAreBounded(t *testing.T) {
	const maxChanges = 64 << 10
	c, path := listedAt10(t, maxChanges)
	c.Changed([]*clientv3.Event{putEv(epPart+"a", "a", 11)}, 11)
	readOnlyJournal(t, c)
	rev := 11
	for i := 0; ; i++ {
		rev++
		c.Changed([]*clientv3.Event{putEv(epPart+fmt.Sprintf("p%03d", i), bigValue(i, rev), int64(rev))}, int64(rev))
		c.mu.Lock()
		valid, size := c.valid, c.changes.size
		c.mu.Unlock()
		if !valid {
			if i*(2<<10) < maxHeldFactor*maxChanges-(4<<10) {
				t.Fatalf("updates stopped after %d values of 2 KiB, want about %d KiB", i+1, maxHeldFactor*maxChanges>>10)
			}
			break
		}
		if size > maxHeldFactor*maxChanges {
			t.Fatalf("%d bytes of changes held, more than %d", size, maxHeldFactor*maxChanges)
		}
	}
	if err := c.save(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	checkFileAt(t, path, 10, map[string]string{"clusterinformation/default": "ci", "workloadendpoints/p00": "old"})
}

// TestChangedAfterRunKeepsNothing: once Run returned, changes open no
// journal and keep nothing (nothing would write them).
func TestChangedAfterRunKeepsNothing(t *testing.T) {
	c, _ := listedAt10(t, 0)
	c.Changed([]*clientv3.Event{putEv(epPart+"a", bigValue(1, 11), 11)}, 11)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	c.Changed([]*clientv3.Event{putEv(epPart+"b", bigValue(2, 12), 12)}, 12)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changes.j != nil || len(c.changes.byKey) != 0 {
		t.Fatalf("after Run returned: journal %v, %d changes kept", c.changes.j != nil, len(c.changes.byKey))
	}
}
