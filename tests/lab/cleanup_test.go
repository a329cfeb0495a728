package lab

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCleanupForgetsTheLastCluster: a lab re-run in the same directory
// (make demo twice) is a new cluster. The nodes' state dirs held the
// previous cluster's identity, so every node held its dataplane against
// the new, empty datastore: no BGP, 8/56 pairs reachable.
func TestCleanupForgetsTheLastCluster(t *testing.T) {
	dir := t.TempDir()
	identity := filepath.Join(dir, "n1", "state", "cluster-identity")
	log := filepath.Join(dir, "n1", "routed.log")
	for _, f := range []string{identity, log, filepath.Join(dir, "etcd", "member")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	Cleanup(context.Background(), "rcleanup-none", dir)
	for _, gone := range []string{filepath.Dir(identity), filepath.Join(dir, "etcd")} {
		if _, err := os.Stat(gone); !os.IsNotExist(err) {
			t.Errorf("%s survived the cleanup (%v)", gone, err)
		}
	}
	if _, err := os.Stat(log); err != nil {
		t.Errorf("the last run's log went with the cleanup: %v", err)
	}
}
