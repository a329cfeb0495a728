// Package etcdserver runs an embedded etcd: a single member (the datastore
// for single-machine use, the demo lab and the tests) or one member of a
// static cluster (the lab's 3-member tier).
package etcdserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// Config says where the embedded etcd keeps data and listens.
type Config struct {
	// Dir holds the data; created if missing.
	Dir string
	// ClientAddr is host:port for clients; port 0 picks a free port.
	ClientAddr string
	// PeerAddr is host:port for the peer listener (unused by a single
	// member); port 0 picks one.
	PeerAddr string
	// Name is the member's name (default "routed").
	Name string
	// InitialCluster, when set, makes this a member of a static cluster:
	// name=peerURL pairs, comma separated, this member's among them (its
	// peer URL must be PeerAddr's). Empty: a single-member cluster.
	// Ignored on a restart with existing data.
	InitialCluster string
	// PeerTLS, when CertFile is set, serves peers over TLS; with
	// TrustedCAFile and ClientCertAuth it requires peer certificates.
	PeerTLS transport.TLSInfo
	// TLS, when CertFile is set, serves clients over TLS; with
	// TrustedCAFile and ClientCertAuth it requires client certificates.
	TLS transport.TLSInfo
	// NoFsync trades durability for speed; for tests only.
	NoFsync bool
	// LogLevel is etcd's own log level (default "error": etcd is chatty).
	LogLevel string
}

// Server is a running embedded etcd.
type Server struct {
	etcd *embed.Etcd
	// Endpoints are the client URLs to give to datastore.Config.
	Endpoints []string
}

// ErrStart wraps failures to start the embedded etcd.
var ErrStart = errors.New("etcdserver: cannot start embedded etcd")

// Start runs etcd and waits until it serves clients or ctx ends.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	var lastErr error
	// Free ports picked here can be taken before etcd binds them; a few
	// attempts make that race harmless when tests run side by side.
	for attempt := 0; attempt < 5; attempt++ {
		s, err := start(ctx, cfg)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: no data directory set", ErrStart)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	clientAddr, err := resolvePort(orDefault(cfg.ClientAddr, "127.0.0.1:2379"))
	if err != nil {
		return nil, err
	}
	peerAddr, err := resolvePort(orDefault(cfg.PeerAddr, "127.0.0.1:0"))
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if !cfg.TLS.Empty() {
		scheme = "https"
	}
	cu := url.URL{Scheme: scheme, Host: clientAddr}
	peerScheme := "http"
	if !cfg.PeerTLS.Empty() {
		peerScheme = "https"
	}
	pu := url.URL{Scheme: peerScheme, Host: peerAddr}

	ec := embed.NewConfig()
	ec.Name = orDefault(cfg.Name, "routed")
	ec.Dir = cfg.Dir
	ec.ListenClientUrls = []url.URL{cu}
	ec.AdvertiseClientUrls = []url.URL{cu}
	ec.ListenPeerUrls = []url.URL{pu}
	ec.AdvertisePeerUrls = []url.URL{pu}
	ec.InitialCluster = orDefault(cfg.InitialCluster, ec.Name+"="+pu.String())
	ec.ClientTLSInfo = cfg.TLS
	ec.PeerTLSInfo = cfg.PeerTLS
	ec.UnsafeNoFsync = cfg.NoFsync
	ec.LogLevel = orDefault(cfg.LogLevel, "error")
	ec.Logger = "zap"
	ec.LogOutputs = []string{"stderr"}

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("%w: %w", ErrStart, err)
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("%w: not ready after 30s", ErrStart)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("%w: %w", ErrStart, ctx.Err())
	}
	return &Server{etcd: e, Endpoints: []string{cu.String()}}, nil
}

// Err delivers a fatal server error, if one happens.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops the server and waits for it to finish.
func (s *Server) Close() { s.etcd.Close() }

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// resolvePort replaces port 0 with a port that is free right now.
func resolvePort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w: address %q: %w", ErrStart, addr, err)
	}
	if port != "0" {
		return addr, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("%w: no free port on %s: %w", ErrStart, host, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
