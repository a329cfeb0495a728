package ctl

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/flowaggtest"
	"github.com/routed-net/routed/routed/flowagg"
)

// TestFlowsNoAnswerTimesOut: an aggregator whose connection slots are
// all taken accepts TCP but never shakes hands; routedctl flows, with
// or without -f, fails within its --timeout naming the aggregator's
// address and the step that timed out.
func TestFlowsNoAnswerTimesOut(t *testing.T) {
	srv := flowaggtest.StartWith(t, followToken, func(c *flowagg.Config) { c.MaxPendingConns = 1 })
	addr := strings.TrimPrefix(srv.URL, "https://")
	hog, err := net.Dial("tcp", addr) // takes the one pending slot, says nothing
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Close()
	for _, follow := range []bool{false, true} {
		args := append(append([]string{"flows"}, srv.CtlArgs()...), "--timeout", "1s")
		if follow {
			args = append(args, "-f")
		}
		took, err := runFlows(t, args)
		if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), stepTLS) {
			t.Errorf("follow=%v: %v, want the TLS handshake with %s timed out", follow, err, addr)
		}
		t.Logf("follow=%v: after %s: %v", follow, took.Round(time.Millisecond), err)
		if took > 3*time.Second {
			t.Errorf("follow=%v: the error took %s with --timeout 1s", follow, took)
		}
	}
}

// TestFlowsSilentServerTimesOut: a server that shakes hands but never
// answers the request, or answers and then falls silent, is an error
// naming the step, not a hang.
func TestFlowsSilentServerTimesOut(t *testing.T) {
	release := make(chan struct{})
	silent := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("node") == "headers-then-silence" {
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	silent.StartTLS()
	defer silent.Close()
	defer close(release)
	dir := t.TempDir()
	ca, tok := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: silent.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte(followToken), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(silent.URL, "https://")
	took, err := runFlows(t, []string{"flows", "--server", silent.URL, "--ca-file", ca, "--token-file", tok, "--timeout", "1s"})
	if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), stepHeaders) {
		t.Errorf("%v, want the answer's headers from %s timed out", err, addr)
	}
	t.Logf("after %s: %v", took.Round(time.Millisecond), err)
	if took > 3*time.Second {
		t.Errorf("the error took %s with --timeout 1s", took)
	}

	// The stream's own bound (45 s in routedctl), shortened.
	c, err := newFlowsClient(flowagg.ReaderConfig{URL: silent.URL, CAFile: ca, Token: followToken}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.idle = 500 * time.Millisecond
	start := time.Now()
	err = readFlows(context.Background(), c, flowagg.Filter{Node: "headers-then-silence"}, false, &bytes.Buffer{}, func(flowagg.Entry) error { return nil })
	if !errors.Is(err, errNoAnswer) || !strings.Contains(err.Error(), stepLine) {
		t.Errorf("a silent stream: %v, want a line of the stream timed out", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a silent stream ended after %s with a bound of 500ms", took)
	}
}

// runFlows runs routedctl with args and says how long it took.
func runFlows(t *testing.T, args []string) (time.Duration, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := New(&out, &errOut)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	err := cmd.ExecuteContext(ctx)
	return time.Since(start), err
}

// TestFlowsRefusedNamesAddress: nothing listening at --server is an
// error at once, naming the address once, with the cause (errors.Is).
func TestFlowsRefusedNamesAddress(t *testing.T) {
	srv := flowaggtest.Start(t, followToken)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	took, err := runFlows(t, []string{"flows", "--server", "https://" + addr, "--ca-file", srv.PKI.CAFile, "--token-file", srv.TokenFile, "-f"})
	t.Logf("after %s: %v", took.Round(time.Millisecond), err)
	if !errors.Is(err, syscall.ECONNREFUSED) || strings.Count(err.Error(), addr) != 1 {
		t.Errorf("%v: want connection refused, naming %s once", err, addr)
	}
	if took > 3*time.Second {
		t.Errorf("the error took %s", took)
	}
}
