// Package datastore stores routed's resources in etcd v3: typed CRUD with
// optimistic concurrency, listing by kind, and a Syncer that streams a
// snapshot and then updates.
//
// Keys: every resource lives at /routed/v1/<plural>/<name> as JSON
// (KeyPrefix). IPAM keeps its own records under /routed/v1/ipam/.
// A resource's ResourceVersion is the etcd ModRevision it was read at.
package datastore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"

	"github.com/routed-net/routed/pkg/api"
)

// KeyPrefix is the root of every key routed writes, but IPAM's whole
// blocks (IPAMDataPrefix), kept outside what the nodes watch.
const KeyPrefix = "/routed/v1/"

// Client is a connection to etcd; safe for concurrent use.
type Client struct {
	cfg  Config
	tls  *tls.Config // nil unless TLS files were given
	etcd *clientv3.Client
}

// New connects to etcd. It does not wait for etcd to be up: operations
// fail with ErrUnavailable after the request timeout instead.
func New(cfg Config) (*Client, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var tlsCfg *tls.Config
	if cfg.CertFile != "" || cfg.KeyFile != "" || cfg.CACertFile != "" {
		info := transport.TLSInfo{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, TrustedCAFile: cfg.CACertFile}
		var err error
		if tlsCfg, err = info.ClientConfig(); err != nil {
			return nil, fmt.Errorf("%w: etcd TLS files: %w", ErrConfig, err)
		}
	}
	ecfg := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		TLS:         tlsCfg,
		Username:    cfg.Username,
		Password:    cfg.Password,
		Logger:      zap.NewNop(),
		// Notice a dead connection (etcd gone without a FIN) in seconds.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
		// etcd refuses pings on a connection without streams (too_many_pings).
		PermitWithoutStream: false,
		// gRPC's default reconnect backoff grows to 120 s: after an
		// outage the client stayed disconnected 20-30 s after etcd was
		// back. Cap it at 1 s (one dial per second per process while etcd
		// is down), so it is usable again within about a second.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 3 * time.Second, // room for a TLS handshake to a busy etcd
		})},
	}
	if cfg.Dialer != nil {
		dial := cfg.Dialer
		ecfg.DialOptions = append(ecfg.DialOptions, grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		}))
	}
	ec, err := clientv3.New(ecfg)
	if err != nil {
		// With a user name New authenticates before it returns: an etcd
		// too busy or too far to answer in DialTimeout is unavailable,
		// not a bad configuration (a CNI ADD would fail with code 7).
		if errors.Is(err, context.DeadlineExceeded) || status.Code(err) == codes.DeadlineExceeded {
			// A certificate the client cannot verify looks the same:
			// say so (still unavailable, as for every other request).
			if tlsCfg != nil {
				if p := tlsProblem(context.Background(), cfg, tlsCfg); p != "" {
					return nil, fmt.Errorf("%w: %v: %s (while authenticating as %q): %w",
						ErrUnavailable, cfg.Endpoints, p, cfg.Username, err)
				}
			}
			return nil, fmt.Errorf("%w: %v did not answer within %v while authenticating as %q: %w",
				ErrUnavailable, cfg.Endpoints, cfg.DialTimeout, cfg.Username, err)
		}
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Client{cfg: cfg, tls: tlsCfg, etcd: ec}, nil
}

// Connected reports whether the client's connection to etcd is up,
// without a request.
func (c *Client) Connected() bool {
	return c.etcd.ActiveConnection().GetState() == connectivity.Ready
}

// Close releases the connection.
func (c *Client) Close() error { return c.etcd.Close() }

// Etcd exposes the raw client for packages with their own key layout
// (IPAM); they must use Ctx for timeouts and Wrap for errors.
func (c *Client) Etcd() *clientv3.Client { return c.etcd }

// Endpoints returns the configured endpoints.
func (c *Client) Endpoints() []string { return c.cfg.Endpoints }

// Ctx bounds one datastore operation by the request timeout.
func (c *Client) Ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, c.cfg.RequestTimeout)
}

// Wrap maps errors from raw etcd calls the same way typed calls do.
func (c *Client) Wrap(err error) error { return c.wrap(err) }

// Key returns the datastore key of a resource.
func Key(k api.Kind, name string) string { return KeyPrefix + k.Plural() + "/" + name }

// KindPrefix returns the key prefix of all resources of a kind.
func KindPrefix(k api.Kind) string { return KeyPrefix + k.Plural() + "/" }

var log = logrus.WithField("component", "datastore")
