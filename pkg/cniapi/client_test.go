package cniapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
)

// serve runs h with net/http, as routed/cniserver does, on a unix socket.
func serve(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "cni.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// TestClientAgainstNetHTTP: the hand-written HTTP/1.0 client reads what
// routed's net/http server answers: a reply, a reply larger than
// net/http's buffer (which a keep-alive HTTP/1.1 request would get
// chunked), a CNI error, a request to fall back, and the request body.
func TestClientAgainstNetHTTP(t *testing.T) {
	long := strings.Repeat("x", 64<<10)
	var got Request
	sock := serve(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			reply(w, 405, ErrorReply{Msg: "method"})
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			reply(w, 400, ErrorReply{Msg: err.Error()})
			return
		}
		switch got.ContainerID {
		case "ok":
			reply(w, 200, AddReply{IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}, EndpointRevision: "7"})
		case "long":
			reply(w, 500, ErrorReply{Code: 11, Msg: long})
		case "fallback":
			reply(w, 503, ErrorReply{Msg: "not for this routed", Fallback: true})
		case "plain":
			http.Error(w, "no", http.StatusBadGateway)
		}
	})
	c := NewClient(sock)
	ctx := context.Background()
	wep := json.RawMessage(`{"kind":"WorkloadEndpoint"}`)
	r, err := c.Add(ctx, &Request{ContainerID: "ok", Node: "n1", Endpoint: wep})
	if err != nil || len(r.IPs) != 1 || r.IPs[0] != netip.MustParseAddr("10.0.0.5") || r.EndpointRevision != "7" {
		t.Fatalf("Add: %+v, %v", r, err)
	}
	if got.Node != "n1" || string(got.Endpoint) != string(wep) {
		t.Errorf("routed got %+v", got)
	}
	_, err = c.Add(ctx, &Request{ContainerID: "long"})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 11 || te.Msg != long {
		t.Errorf("long CNI error: %v", err)
	}
	if _, err := c.Del(ctx, &Request{ContainerID: "fallback"}); !IsUnreachable(err) || !strings.Contains(err.Error(), "not for this routed") {
		t.Errorf("fallback: %v", err)
	}
	if _, err := c.Del(ctx, &Request{ContainerID: "plain"}); !IsUnreachable(err) || !strings.Contains(err.Error(), "502") {
		t.Errorf("a reply that is no ErrorReply: %v", err)
	}
}

// TestClientUnreachable: no socket, a connection closed without a
// reply, and a context that ends while routed works.
func TestClientUnreachable(t *testing.T) {
	ctx := context.Background()
	if _, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Add(ctx, &Request{}); !IsUnreachable(err) {
		t.Errorf("no socket: %v", err)
	}
	sock := filepath.Join(t.TempDir(), "close.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Read(make([]byte, 4096))
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Len"))
			c.Close()
		}
	}()
	if _, err := NewClient(sock).Add(ctx, &Request{}); !IsUnreachable(err) || !errors.Is(err, errBadReply) {
		t.Errorf("connection closed mid-reply: %v", err)
	}

	block := make(chan struct{})
	t.Cleanup(func() { close(block) })
	slow := serve(t, func(w http.ResponseWriter, r *http.Request) { <-block })
	tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = NewClient(slow).Add(tctx, &Request{})
	if !errors.Is(err, context.DeadlineExceeded) || IsUnreachable(err) {
		t.Errorf("context ended while routed works: %v (must be the context's error: routed may still do it)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("returned after %s", d)
	}
}

// TestParseReply covers what net/http never sends but a reply could hold.
func TestParseReply(t *testing.T) {
	for raw, ok := range map[string]bool{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}\n":                  true,
		"HTTP/1.0 500 Internal Server Error\r\n\r\n{}":                      true,
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0": false,
		"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}":                    false,
		"SSH-2.0\r\n\r\n": false,
		"HTTP/1.1 200 OK": false,
	} {
		if _, _, err := parseReply([]byte(raw)); (err == nil) != ok {
			t.Errorf("%q: %v", raw, err)
		}
	}
}
