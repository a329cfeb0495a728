// Package etcdtest starts a real embedded etcd for a test and stops it in
// t.Cleanup, so tests that run side by side each get their own datastore.
package etcdtest

import (
	"context"
	"testing"

	"github.com/routed-net/routed/pkg/etcdserver"
)

// Start runs an embedded etcd on free loopback ports with its data in a
// fresh temp dir, and returns it; it is closed when the test ends. It
// does not fsync: tests need correctness, not durability.
func Start(t testing.TB) *etcdserver.Server { return start(t, true) }

// StartDurable is Start with fsync on, as production runs etcd: for
// benchmarks, whose figures must include the disk.
func StartDurable(t testing.TB) *etcdserver.Server { return start(t, false) }

func start(t testing.TB, noFsync bool) *etcdserver.Server {
	t.Helper()
	s, err := etcdserver.Start(context.Background(), etcdserver.Config{
		Dir:        t.TempDir(),
		ClientAddr: "127.0.0.1:0",
		PeerAddr:   "127.0.0.1:0",
		NoFsync:    noFsync,
		LogLevel:   "fatal", // shutdown is noisy at error level
	})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
