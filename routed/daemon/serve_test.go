package daemon

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// TestServeHTTPReturnsAfterShutdown: serveHTTP returns only once its
// server has shut down, a request in flight included (its shutdown
// goroutine is joined), not as soon as Serve stops accepting.
func TestServeHTTPReturnsAfterShutdown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // serveHTTP listens on it again

	started, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		finished.Store(true)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- serveHTTP(ctx, addr, h) }()

	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return "not listening yet: " + err.Error()
		}
		c.Close()
		return ""
	})
	go func() { _, _ = http.Get("http://" + addr + "/") }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	cancel()
	// Shutdown has begun once the listener is closed; Serve has returned
	// by then or just after.
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return ""
		}
		c.Close()
		return "still accepting"
	})
	close(release)
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("serveHTTP = %v", err)
		}
		if !finished.Load() {
			t.Fatal("serveHTTP returned while a request was in flight")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serveHTTP did not return after shutdown")
	}
}
