package cnitoken

import (
	"bufio"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// freezer is a TCP proxy that can stop forwarding both ways without
// closing anything, as a network that silently lost a connection does.
type freezer struct {
	ln     net.Listener
	frozen chan struct{}
	mu     sync.Mutex
	conns  []net.Conn // closed at the test's end
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, frozen: make(chan struct{})}
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, s)
			f.mu.Unlock()
			go f.copy(s, c)
			go f.copy(c, s)
		}
	}()
	return f
}

// copy forwards from src to dst until frozen, then holds what it read.
func (f *freezer) copy(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		select {
		case <-f.frozen:
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (f *freezer) freeze() { close(f.frozen) }

// TestWatchOverSilentConnectionFails: a watch over HTTP/2 whose
// connection stops carrying anything (neither side closes it) fails
// within the ping's bounds, so the keeper watching opens a new one; a
// watch without pings would wait for TCP's retransmissions.
func TestWatchOverSilentConnectionFails(t *testing.T) {
	proto := make(chan int, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case proto <- r.ProtoMajor:
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"type":"ADDED","object":{}}`+"\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	proxy := newFreezer(t, srv.Listener.Addr().String())

	tokenFile := filepath.Join(t.TempDir(), "token")
	f := &fakeAPI{tokenFile: tokenFile}
	f.rotate(t, "node-token")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	c, err := NewClient(ClientConfig{Server: "https://" + proxy.ln.Addr().String(), CAData: ca, TokenFile: tokenFile,
		PingAfter: 300 * time.Millisecond, PingTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	body, err := c.Watch(t.Context(), "/api/v1/nodes", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer body.Close()
	if p := <-proto; p != 2 {
		t.Fatalf("the watch went over HTTP/%d, want 2", p)
	}
	r := bufio.NewReader(body)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	proxy.freeze()
	began := time.Now()
	failed := make(chan error, 1)
	go func() {
		_, err := r.ReadString('\n')
		failed <- err
	}()
	select {
	case err := <-failed:
		if err == nil {
			t.Fatal("read an event over a frozen connection")
		}
		t.Logf("the watch failed %v after the connection froze: %v", time.Since(began).Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatal("the watch over a frozen connection still waits after 20 s: no HTTP/2 ping")
	}
}
