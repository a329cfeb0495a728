package status

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

type fakeProvider struct{ peers []Peer }

func (f fakeProvider) Peers(context.Context) ([]Peer, error) { return f.peers, nil }
func (f fakeProvider) Routes(context.Context) ([]Route, error) {
	return nil, errors.New("rib unavailable")
}
func (f fakeProvider) Process(context.Context) (Process, error) {
	return Process{PID: 42, NodeName: "n1"}, nil
}

func TestServeAndRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "routed.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- NewServer(sock, fakeProvider{peers: []Peer{{Address: "10.0.0.2", State: StateUp}}}).Run(ctx)
	}()
	c := NewClient(sock)
	var peers []Peer
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() string {
		var err error
		if peers, err = c.Peers(context.Background()); err != nil {
			return fmt.Sprintf("the server never answered peers: %v", err)
		}
		return ""
	})
	if len(peers) != 1 || peers[0].Address != "10.0.0.2" {
		t.Fatalf("peers %v", peers)
	}
	for path, mode := range map[string]os.FileMode{dir: 0o700, sock: 0o600} {
		st, err := os.Stat(path)
		if err != nil || st.Mode().Perm() != mode {
			t.Fatalf("%s: mode %v (err %v), want %v", path, st.Mode().Perm(), err, mode)
		}
	}
	if p, err := c.Process(context.Background()); err != nil || p.PID != 42 {
		t.Fatalf("process %+v %v", p, err)
	}
	if _, err := c.Routes(context.Background()); err == nil || errors.Is(err, ErrNotRunning) {
		t.Fatalf("provider error not passed on: %v", err)
	}
	// Go's heap profile comes through the socket in pprof's (gzipped
	// protobuf) format; an unknown profile is an error that names it.
	var heap bytes.Buffer
	if err := c.Profile(context.Background(), "heap", &heap); err != nil || heap.Len() < 2 || heap.Bytes()[0] != 0x1f || heap.Bytes()[1] != 0x8b {
		t.Fatalf("heap profile: %d bytes, err %v; want a gzip stream", heap.Len(), err)
	}
	if err := c.Profile(context.Background(), "nosuch", io.Discard); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("unknown profile: %v; want an error naming it", err)
	}
	// A CPU profile samples for the time asked; the time is checked and
	// a profile already being taken (Go allows one) is refused by name.
	var cpu bytes.Buffer
	if err := c.CPUProfile(context.Background(), time.Second, &cpu); err != nil || cpu.Len() < 2 || cpu.Bytes()[0] != 0x1f || cpu.Bytes()[1] != 0x8b {
		t.Fatalf("cpu profile: %d bytes, err %v; want a gzip stream", cpu.Len(), err)
	}
	if err := c.CPUProfile(context.Background(), 6*time.Minute, io.Discard); err == nil || !strings.Contains(err.Error(), "5m0s") {
		t.Fatalf("cpu profile of 6m: %v; want an error naming the limit", err)
	}
	resp, err := c.http.Get("http://routed" + PathCPUProfile + "?seconds=0")
	if err != nil {
		t.Fatal(err)
	}
	if err := errorReply(resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), `seconds="0"`) {
		t.Fatalf("cpu profile of 0 s: %s %v; want 400 naming it", resp.Status, err)
	}
	resp.Body.Close()
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Fatal(err)
	}
	err = c.CPUProfile(context.Background(), time.Second, io.Discard)
	pprof.StopCPUProfile()
	if err == nil || !strings.Contains(err.Error(), "cpu profiling already in use") {
		t.Fatalf("cpu profile while one runs: %v; want it refused", err)
	}
	// A second server must not steal a live socket.
	if err := NewServer(sock, fakeProvider{}).Run(context.Background()); !errors.Is(err, ErrInUse) {
		t.Fatalf("second server: %v, want ErrInUse", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := c.Peers(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("after stop: %v, want ErrNotRunning", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "routed.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close() // leaves the file behind, like a crashed routed
	if _, err := NewClient(sock).Peers(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("stale socket: %v, want ErrNotRunning", err)
	}
	l2, err := Listen(sock)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l2.Close()
}

func TestSocketPath(t *testing.T) {
	t.Setenv(EnvSocket, "")
	if SocketPath("") != DefaultSocketPath {
		t.Fatal("default")
	}
	t.Setenv(EnvSocket, "/tmp/x.sock")
	if SocketPath("") != "/tmp/x.sock" || SocketPath("/flag.sock") != "/flag.sock" {
		t.Fatal("env or flag ignored")
	}
}
