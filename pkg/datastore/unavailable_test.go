package datastore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
)

// closedEndpoint returns an http endpoint on a loopback port nobody
// listens on. The port stays bound (without listen) until the test ends,
// so an etcd started by a parallel test cannot take it over.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	port := sa.(*syscall.SockaddrInet4).Port
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// unavailableBound is how long any operation against a dead etcd may take
// with the default timeouts: the request timeout plus the probe. It is a
// correctness bound (nothing hangs), not a performance target.
const unavailableBound = 8 * time.Second

func TestDeadEtcd(t *testing.T) {
	t.Parallel()
	ep := closedEndpoint(t)
	c := connect(t, Config{Endpoints: []string{ep}}) // New must not block on a dead etcd

	ops := []struct {
		name string
		op   func(ctx context.Context) error
	}{
		{"get", func(ctx context.Context) error { _, err := c.Get(ctx, api.KindNode, "n1"); return err }},
		{"list", func(ctx context.Context) error { _, _, err := c.List(ctx, api.KindNode); return err }},
		{"create", func(ctx context.Context) error { _, err := c.Create(ctx, newNode("n1", nil)); return err }},
		{"create pool", func(ctx context.Context) error { _, err := c.Create(ctx, newPool("p", "10.0.0.0/16")); return err }},
		{"apply", func(ctx context.Context) error { _, err := c.Apply(ctx, newNode("n1", nil)); return err }},
		{"update", func(ctx context.Context) error {
			n := newNode("n1", nil)
			n.Metadata.ResourceVersion = "5"
			_, err := c.Update(ctx, n)
			return err
		}},
		{"delete", func(ctx context.Context) error { return c.Delete(ctx, api.KindNode, "n1", "5") }},
	}
	for _, tt := range ops {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := tt.op(context.Background())
			elapsed := time.Since(start)
			if elapsed > unavailableBound {
				t.Errorf("took %v against a dead etcd, want < %v", elapsed, unavailableBound)
			}
			wantErr(t, tt.name, err, ErrUnavailable)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("the cause should stay visible to errors.Is: %v", err)
			}
			if !strings.Contains(err.Error(), ep) {
				t.Errorf("message should name the endpoint %s: %v", ep, err)
			}
		})
	}
}

func TestCallerCancellation(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Get(ctx, api.KindNode, "n1")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled caller must be able to tell with errors.Is: %v", err)
	}
}

func TestRequestTimeoutIsUsed(t *testing.T) {
	t.Parallel()
	c := connect(t, Config{Endpoints: []string{closedEndpoint(t)}, RequestTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := c.Get(context.Background(), api.KindNode, "n1")
	wantErr(t, "get", err, ErrUnavailable)
	if elapsed := time.Since(start); elapsed > 3*time.Second {
		t.Fatalf("RequestTimeout 300ms not honoured: took %v", elapsed)
	}
}

func TestStreamAgainstDeadEtcdStopsWithContext(t *testing.T) {
	t.Parallel()
	c := connect(t, Config{Endpoints: []string{closedEndpoint(t)}, RequestTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	rec := newStreamRecorder()
	start := time.Now()
	err := c.Stream(ctx, KeyPrefix, rec, StreamOptions{})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stream must return the context's error, got %v", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("Stream kept retrying %v after its context ended", elapsed)
	}
	if n := len(rec.reasons); n != 0 {
		t.Fatalf("no list can come from a dead etcd, got %d", n)
	}
}

// TestSlowAuthIsUnavailable: with a user name, New authenticates before
// it returns; an etcd that accepts the connection but does not answer in
// DialTimeout is unavailable (retry), not a bad configuration (a CNI
// ADD failed with code 7, "invalid network config", when a busy etcd
// took longer than 3 s to check a password).
func TestSlowAuthIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan []net.Conn, 1) // the connections accepted, held open, never answered
	go func() {
		var conns []net.Conn
		for {
			c, err := ln.Accept()
			if err != nil {
				held <- conns
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for _, c := range <-held {
			c.Close()
		}
	})
	_, err = New(Config{Endpoints: []string{"http://" + ln.Addr().String()}, Username: "routed-cni", Password: "pw",
		DialTimeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("New against a silent etcd: %v; want ErrUnavailable naming the wait, not ErrConfig", err)
	}
}
