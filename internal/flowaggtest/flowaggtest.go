// Package flowaggtest runs a real flow aggregator (routed/flowagg) for
// tests, as a cluster runs it: HTTPS with mutual TLS under a throw-away
// CA, and a reader token in a file, on a loopback port. It is for tests
// only; it fails the test it is given, and the test's cleanup stops
// the aggregator.
package flowaggtest

import (
	"context"
	"crypto/tls"
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
}

// Start serves an aggregator whose readers use token until the test
// ends.
func Start(t testing.TB, token string) *Aggregator {
	t.Helper()
	a := &Aggregator{PKI: testpki.New(t), Token: token, TokenFile: filepath.Join(t.TempDir(), "token")}
	if err := os.WriteFile(a.TokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := flowagg.NewServer(flowagg.Config{CertFile: a.PKI.ServerCert, KeyFile: a.PKI.ServerKey, ClientCAFile: a.PKI.CAFile, TokenFile: a.TokenFile})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := srv.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ctx, tls.NewListener(ln, tc)) }()
	t.Cleanup(func() { cancel(); <-done })
	a.Server, a.URL = srv, "https://"+ln.Addr().String()
	return a
}

// CtlArgs are the flags routedctl flows reads the aggregator with: its
// URL, the CA and the token file.
func (a *Aggregator) CtlArgs() []string {
	return []string{"--server", a.URL, "--ca-file", a.PKI.CAFile, "--token-file", a.TokenFile}
}
