// Package flowaggtest runs a real flow aggregator (routed/flowagg) for
// tests, as a cluster runs it: HTTPS with mutual TLS under a throw-away
// CA, and a reader token in a file, on a loopback port. It is for tests
// only; it fails the test it is given, and the test's cleanup stops
// the aggregator.
package flowaggtest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/routed/flowagg"
)

// Aggregator is a running aggregator and what a client needs to reach
// it.
type Aggregator struct {
	*flowagg.Server
	// URL is https://127.0.0.1:<port>.
	URL string
	// PKI is the CA the server's certificate is signed by; it issues
	// the nodes' client certificates too (PKI.IssueClient).
	PKI testpki.PKI
	// Token is the readers' token, TokenFile the file holding it.
	Token, TokenFile string

	cfg  flowagg.Config
	addr string
	stop func() // stops the running server; nil when stopped
}

// Start serves an aggregator whose readers use token until the test
// ends.
func Start(t testing.TB, token string) *Aggregator { return StartWith(t, token, nil) }

// StartWith is Start with edit applied to the server's configuration
// (smaller limits, say).
func StartWith(t testing.TB, token string, edit func(*flowagg.Config)) *Aggregator {
	t.Helper()
	a := &Aggregator{PKI: testpki.New(t), Token: token, TokenFile: filepath.Join(t.TempDir(), "token"), addr: "127.0.0.1:0"}
	if err := os.WriteFile(a.TokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	a.cfg = flowagg.Config{CertFile: a.PKI.ServerCert, KeyFile: a.PKI.ServerKey, ClientCAFile: a.PKI.CAFile, TokenFile: a.TokenFile}
	if edit != nil {
		edit(&a.cfg)
	}
	a.serve(t)
	t.Cleanup(a.Stop)
	a.URL = "https://" + a.addr
	return a
}

// serve starts a new server (an empty window) on a.addr.
func (a *Aggregator) serve(t testing.TB) {
	t.Helper()
	srv, err := flowagg.NewServer(a.cfg)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := srv.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", a.addr)
	if err != nil {
		t.Fatal(err)
	}
	a.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, flowagg.TLSListener(ln, tc)) }()
	a.Server, a.stop = srv, func() { cancel(); <-done }
}

// Stop stops the aggregator, as its pod going away does: its listener
// closes and its streams end.
func (a *Aggregator) Stop() {
	if a.stop != nil {
		a.stop()
		a.stop = nil
	}
}

// Restart stops the aggregator and starts a new one (an empty window
// beginning with its aggregator-started gap) at the same URL, as a
// Deployment replacing its pod behind a Service does.
func (a *Aggregator) Restart(t testing.TB) {
	t.Helper()
	a.Stop()
	a.serve(t)
}

// CtlArgs are the flags routedctl flows reads the aggregator with: its
// URL, the CA and the token file.
func (a *Aggregator) CtlArgs() []string {
	return []string{"--server", a.URL, "--ca-file", a.PKI.CAFile, "--token-file", a.TokenFile}
}
