package listcache

import (
	"context"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestListDuringCommit: a second list finishes while Run puts the first
// in place (the sync and rename run outside the lock), and that first
// one goes in place or fails to. The second is the base from then on: it
// goes in place in the same save, the changes after it are merged into
// it, and a restart loads them. (save used to merge the second list's
// changes into the first list's file, fail its revision check and follow
// nothing more until the next list; or, when the first failed, return
// that failure and leave the second waiting for the next write.)
func TestListDuringCommit(t *testing.T) {
	for name, firstFails := range map[string]bool{"first in place": false, "first fails": true} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache")
			c, err := New(Options{Path: path, WriteRate: -1})
			if err != nil {
				t.Fatal(err)
			}
			c.Load(prefix, parts, probeKey)
			list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2), kv(epPart+"a", "a", 3)}, 10, 1)
			c.committing = func(first *listWrite) {
				c.committing = nil // runs once; Listed takes the lock save does not hold here
				list(c, []*mvccpb.KeyValue{kv(probeKey, "ci", 2), kv(epPart+"a", "a2", 15), kv(epPart+"b", "b", 20)}, 20, 1)
				if firstFails {
					first.tmp.Close() // its sync fails
				}
			}
			if err := c.save(context.Background(), false); err != nil {
				t.Fatalf("the save across the second list: %v", err)
			}
			c.Changed([]*clientv3.Event{putEv(epPart+"c", "c", 21)}, 21)
			if err := c.save(context.Background(), false); err != nil {
				t.Fatalf("the save of a change after the second list: %v", err)
			}
			c.mu.Lock()
			valid, savedRev := c.valid, c.savedRev
			c.mu.Unlock()
			if !valid || savedRev != 21 {
				t.Errorf("after the second list and a change: valid %v, on disk at %d; want true, 21", valid, savedRev)
			}

			c2, err := New(Options{Path: path})
			if err != nil {
				t.Fatal(err)
			}
			cl, ok := c2.Load(prefix, parts, probeKey)
			if !ok {
				t.Fatal("a restart found no cache")
			}
			got := renderKVs(loaded(t, cl))
			want := probeKey + "=ci@2\n" + epPart + "a=a2@15\n" + epPart + "b=b@20\n" + epPart + "c=c@21\n"
			if cl.Revision != 21 || got != want {
				t.Errorf("a restart loads revision %d:\n%swant 21:\n%s", cl.Revision, got, want)
			}
		})
	}
}
