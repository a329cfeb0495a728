package cluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A process that exits while awaited ends the wait at once, with its
// log's last lines; a wait that runs out names what and the last error.
func TestWaitForStopsWhenProcessExited(t *testing.T) {
	log := filepath.Join(t.TempDir(), "etcd.log")
	if err := os.WriteFile(log, []byte("starting\nbind: address already in use\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: "etcd", log: log, done: make(chan struct{})}
	n := 0
	start := time.Now()
	err := waitFor(context.Background(), time.Minute, "etcd ready", func() error {
		if n++; n == 2 {
			close(p.done)
		}
		return p.exitedErr()
	})
	if !errors.Is(err, errExited) || n != 2 || time.Since(start) > 10*time.Second {
		t.Fatalf("waitFor = %v after %d polls, %v; want errExited after 2", err, n, time.Since(start))
	}
	if want := "etcd ready: etcd exited: starting\nbind: address already in use"; err.Error() != want {
		t.Errorf("waitFor = %q, want %q", err, want)
	}

	err = waitFor(context.Background(), 300*time.Millisecond, "routed's etcd ready", func() error { return errors.New("dial: connection refused") })
	if err == nil || !strings.HasPrefix(err.Error(), "routed's etcd ready: ") || !strings.HasSuffix(err.Error(), ": dial: connection refused") {
		t.Errorf("waitFor = %v, want what and the last error", err)
	}
}
