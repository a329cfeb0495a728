package feed_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver"
)

// childEtcdEnv, when set, makes the test binary an etcd server in the
// directory it names (TestMain): the memory benchmark runs etcd in
// another process so that the heap it measures is the feed's alone.
const childEtcdEnv = "ROUTED_FEED_BENCH_ETCD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEtcdEnv); dir != "" {
		os.Exit(runChildEtcd(dir))
	}
	os.Exit(m.Run())
}

// runChildEtcd serves etcd until its stdin closes (the parent ended),
// printing the client endpoint first.
func runChildEtcd(dir string) int {
	s, err := etcdserver.Start(context.Background(), etcdserver.Config{Dir: dir, ClientAddr: "127.0.0.1:0",
		PeerAddr: "127.0.0.1:0", NoFsync: true, LogLevel: "fatal"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child etcd:", err)
		return 1
	}
	fmt.Println("endpoints", strings.Join(s.Endpoints, ","))
	_, _ = io.Copy(io.Discard, os.Stdin)
	s.Close()
	return 0
}

// childEtcdClient starts etcd in a child process (this test binary, see
// TestMain) and returns a client of it; both end with the test.
func childEtcdClient(tb testing.TB) *datastore.Client {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(), childEtcdEnv+"="+tb.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "endpoints ") {
		tb.Fatalf("child etcd did not start: %q, %v", line, err)
	}
	eps := strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "endpoints ")), ",")
	ds, err := datastore.New(datastore.Config{Endpoints: eps})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ds.Close() })
	return ds
}
