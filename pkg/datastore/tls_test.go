package datastore

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/etcdserver"
)

// startTLSEtcd runs an embedded etcd that serves only TLS and requires a
// client certificate signed by pki's CA.
func startTLSEtcd(t *testing.T, pki testpki.PKI) *etcdserver.Server {
	t.Helper()
	s, err := etcdserver.Start(context.Background(), etcdserver.Config{
		Dir:        t.TempDir(),
		ClientAddr: "127.0.0.1:0",
		PeerAddr:   "127.0.0.1:0",
		NoFsync:    true,
		TLS: transport.TLSInfo{
			CertFile:       pki.ServerCert,
			KeyFile:        pki.ServerKey,
			TrustedCAFile:  pki.CAFile,
			ClientCertAuth: true,
		},
	})
	if err != nil {
		t.Fatalf("start TLS etcd: %v", err)
	}
	t.Cleanup(s.Close)
	if !strings.HasPrefix(s.Endpoints[0], "https://") {
		t.Fatalf("TLS etcd endpoint %q is not https", s.Endpoints[0])
	}
	return s
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	pki := testpki.New(t)
	s := startTLSEtcd(t, pki)

	t.Run("crud with client certificate", func(t *testing.T) {
		t.Parallel()
		c := connect(t, Config{Endpoints: s.Endpoints, CACertFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey})
		ctx := testCtx(t)
		created, err := c.Create(ctx, newPool("tls", "10.50.0.0/16"))
		if err != nil {
			t.Fatalf("Create over mTLS: %v", err)
		}
		got, err := c.Get(ctx, api.KindIPPool, "tls")
		if err != nil || got.Meta().ResourceVersion != created.Meta().ResourceVersion {
			t.Fatalf("Get over mTLS: %v, %v", got, err)
		}
		if _, err := c.Update(ctx, got); err != nil {
			t.Fatalf("Update over mTLS: %v", err)
		}
		if list, _, err := c.List(ctx, api.KindIPPool); err != nil || len(list) != 1 {
			t.Fatalf("List over mTLS: %v, %v", list, err)
		}
		if err := c.Delete(ctx, api.KindIPPool, "tls", ""); err != nil {
			t.Fatalf("Delete over mTLS: %v", err)
		}
		// The stream works over TLS too.
		rec := newStreamRecorder()
		startStream(t, c, KindPrefix(api.KindIPPool), rec, "")
		rec.waitFor(t, "the list over mTLS", func() bool { return len(rec.reasons) == 1 })
		if _, err := c.Create(ctx, newPool("tls2", "10.51.0.0/16")); err != nil {
			t.Fatal(err)
		}
		rec.waitFor(t, "the event over mTLS", func() bool { _, ok := rec.state[Key(api.KindIPPool, "tls2")]; return ok })
	})

	other := testpki.New(t) // a different CA
	rejected := []struct {
		name    string
		cfg     Config
		mention string // what the error must tell the operator
	}{
		{
			name:    "no client certificate",
			cfg:     Config{Endpoints: s.Endpoints, CACertFile: pki.CAFile},
			mention: "certificate",
		},
		{
			name:    "client certificate from another CA",
			cfg:     Config{Endpoints: s.Endpoints, CACertFile: pki.CAFile, CertFile: other.ClientCert, KeyFile: other.ClientKey},
			mention: "TLS",
		},
		{
			name:    "server not trusted",
			cfg:     Config{Endpoints: s.Endpoints, CACertFile: other.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey},
			mention: "certificate",
		},
		{
			name:    "no TLS settings at all",
			cfg:     Config{Endpoints: s.Endpoints},
			mention: "TLS",
		},
		{
			name: "plain http to a TLS port",
			cfg:  Config{Endpoints: []string{"http://" + strings.TrimPrefix(s.Endpoints[0], "https://")}},
		},
	}
	for _, tt := range rejected {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := connect(t, tt.cfg)
			start := time.Now()
			_, err := c.Get(context.Background(), api.KindIPPool, "x")
			if elapsed := time.Since(start); elapsed > unavailableBound {
				t.Errorf("took %v, want < %v: a TLS failure must not hang", elapsed, unavailableBound)
			}
			wantErr(t, "Get", err, ErrUnavailable)
			if !strings.Contains(err.Error(), tt.cfg.Endpoints[0]) {
				t.Errorf("message should name the endpoint: %v", err)
			}
			if tt.mention != "" && !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("message should mention %q so the operator knows it is a TLS problem: %v", tt.mention, err)
			}
			t.Logf("%s: %v", tt.name, err)
		})
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	t.Parallel()
	pki := testpki.New(t)
	ep := []string{"https://127.0.0.1:2379"}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"cert without key", Config{Endpoints: ep, CertFile: pki.ClientCert}},
		{"key without cert", Config{Endpoints: ep, KeyFile: pki.ClientKey}},
		{"missing CA file", Config{Endpoints: ep, CACertFile: "/nonexistent/ca.pem"}},
		{"missing cert file", Config{Endpoints: ep, CertFile: "/nonexistent/c.pem", KeyFile: "/nonexistent/k.pem"}},
		{"key does not match cert", Config{Endpoints: ep, CertFile: pki.ClientCert, KeyFile: pki.ServerKey}},
		{"endpoint without scheme", Config{Endpoints: []string{"127.0.0.1:2379"}}},
		{"unknown scheme", Config{Endpoints: []string{"unix:///run/etcd.sock"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := New(tt.cfg)
			if err == nil {
				c.Close()
			}
			wantErr(t, "New", err, ErrConfig)
		})
	}
}

// TestNewWithUserNamesAnUntrustedServer: with a user name, New
// authenticates before it returns; against an etcd whose certificate the
// configured CA does not sign, etcd's client only sees a dial that never
// ends. New says what is wrong (the certificate, the endpoint), not
// only that etcd "did not answer" (a review finding: a wrong CA file
// read as an etcd too busy to answer). Real TLS etcd.
func TestNewWithUserNamesAnUntrustedServer(t *testing.T) {
	t.Parallel()
	pki := testpki.New(t)
	s := startTLSEtcd(t, pki)
	other := testpki.New(t)
	_, err := New(Config{Endpoints: s.Endpoints, CACertFile: other.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey,
		Username: "routed-cni", Password: "pw", DialTimeout: 500 * time.Millisecond})
	wantErr(t, "New", err, ErrUnavailable)
	if err == nil || !strings.Contains(err.Error(), "TLS handshake with "+s.Endpoints[0]) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("New against an etcd the CA does not sign: %v; want the handshake's certificate error naming the endpoint", err)
	}
	t.Log(err)
}
