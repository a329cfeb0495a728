package reimport

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

func wep(name, node, iface string) *api.WorkloadEndpoint {
	w := &api.WorkloadEndpoint{}
	w.Metadata.Name = name
	w.Spec.Node, w.Spec.InterfaceName, w.Spec.IPNetworks = node, iface, []string{"10.0.0.1/32"}
	return w
}

func upd(w *api.WorkloadEndpoint) feed.Update {
	return feed.Update{Kind: api.KindWorkloadEndpoint, Name: w.Metadata.Name, Resource: w}
}

// waitSaved waits until a fresh Journal loading path with guid keeps
// want endpoints.
func waitSaved(t *testing.T, path, guid string, want int) *Journal {
	t.Helper()
	var j *Journal
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() string {
		j = NewJournal(path, "n1", func() string { return guid })
		if n, err := j.Load(guid); err != nil || n != want {
			return fmt.Sprintf("saved view: %d endpoints (%v), want %d", n, err, want)
		}
		return ""
	})
	return j
}

func TestJournalSavesTheNodesTrustedEndpoints(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "local-endpoints.json")
	j := NewJournal(path, "n1", func() string { return "guid-a" })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = j.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	a, b, other := wep("n1-a", "n1", "calia"), wep("n1-b", "n1", "calib"), wep("n2-c", "n2", "calic")
	j.OnBatch(feed.Batch{Snapshot: true, Revision: 10, Updates: []feed.Update{upd(a), upd(b), upd(other)}})
	got := waitSaved(t, path, "guid-a", 2)
	ws, ok := got.Saved()
	if !ok || len(ws) != 2 || ws[0].Metadata.Name != "n1-a" || ws[1].Spec.InterfaceName != "calib" {
		t.Fatalf("saved %v (%v), want n1-a and n1-b", ws, ok)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the saved view's mode: %v (%v), want 0600", st.Mode(), err)
	}

	// A delete and a change go out; so does a snapshot that replaces all.
	j.OnBatch(feed.Batch{Revision: 11, Updates: []feed.Update{{Kind: api.KindWorkloadEndpoint, Name: "n1-a", Deleted: true}}})
	waitSaved(t, path, "guid-a", 1)
	d := wep("n1-d", "n1", "calid")
	j.OnBatch(feed.Batch{Snapshot: true, Revision: 12, Updates: []feed.Update{upd(d), upd(wep("n1-e", "n1", "calie"))}})
	got = waitSaved(t, path, "guid-a", 2)
	if ws, _ := got.Saved(); ws[0].Metadata.Name != "n1-d" {
		t.Fatalf("after the snapshot: %v, want n1-d and n1-e", ws)
	}

	// Another datastore's view is not used.
	j2 := NewJournal(path, "n1", func() string { return "guid-b" })
	if n, err := j2.Load("guid-b"); err == nil || n != 0 {
		t.Fatalf("a view of datastore guid-a loaded for guid-b: %d, %v", n, err)
	}
	if _, ok := j2.Saved(); ok {
		t.Fatal("Saved reports a view of another datastore")
	}
}

func TestJournalWithoutAFile(t *testing.T) {
	j := NewJournal(filepath.Join(t.TempDir(), "none.json"), "n1", func() string { return "g" })
	if n, err := j.Load("g"); n != 0 || err != nil {
		t.Fatalf("Load of a missing file: %d, %v; want 0, nil", n, err)
	}
	if _, ok := j.Saved(); ok {
		t.Fatal("Saved reports a view when nothing was saved")
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewJournal(bad, "n1", func() string { return "g" }).Load("g"); err == nil {
		t.Fatal("Load of a corrupt file: no error")
	}
}
