// Package dsconfig is how to reach etcd (pkg/datastore's Config, which
// aliases it), apart from the etcd client: the CNI plugins' socket-only
// builds validate a network configuration's etcd fields exactly as the
// full builds do without linking etcd, gRPC and protobuf.
package dsconfig

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// ErrConfig means the connection settings are unusable
// (datastore.ErrConfig).
var ErrConfig = errors.New("datastore: bad configuration")

// Config holds how to reach etcd. Zero timeouts take the defaults.
type Config struct {
	Endpoints  []string
	CACertFile string
	CertFile   string
	KeyFile    string
	// Username and Password authenticate with etcd's user/password auth
	// instead of a client certificate's common name (embedding, tests).
	Username string
	Password string
	// DialTimeout bounds connecting; RequestTimeout bounds each operation,
	// so nothing hangs when etcd is down.
	DialTimeout    time.Duration
	RequestTimeout time.Duration
	// Dialer, when set, opens the TCP connections to etcd (tests and
	// harnesses reaching an etcd inside another network namespace).
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Defaults for Config.
const (
	DefaultEndpoint       = "http://127.0.0.1:2379"
	DefaultDialTimeout    = 3 * time.Second
	DefaultRequestTimeout = 5 * time.Second
)

// ConfigFromEnv reads the usual Calico environment names: ETCD_ENDPOINTS
// (comma separated), ETCD_CA_CERT_FILE, ETCD_CERT_FILE, ETCD_KEY_FILE.
func ConfigFromEnv() Config {
	c := Config{
		CACertFile: os.Getenv("ETCD_CA_CERT_FILE"),
		CertFile:   os.Getenv("ETCD_CERT_FILE"),
		KeyFile:    os.Getenv("ETCD_KEY_FILE"),
	}
	if e := os.Getenv("ETCD_ENDPOINTS"); e != "" {
		c.Endpoints = SplitEndpoints(e)
	}
	return c
}

// SplitEndpoints splits a comma-separated endpoint list, dropping blanks.
func SplitEndpoints(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// BindFlags registers --etcd-* flags on fs, defaulting to the environment.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	env := ConfigFromEnv()
	def := env.Endpoints
	if len(def) == 0 {
		def = []string{DefaultEndpoint}
	}
	fs.StringSliceVar(&c.Endpoints, "etcd-endpoints", def, "etcd endpoints, comma separated (env ETCD_ENDPOINTS)")
	fs.StringVar(&c.CACertFile, "etcd-ca-cert-file", env.CACertFile, "CA to verify etcd's certificate (env ETCD_CA_CERT_FILE)")
	fs.StringVar(&c.CertFile, "etcd-cert-file", env.CertFile, "client certificate for etcd (env ETCD_CERT_FILE)")
	fs.StringVar(&c.KeyFile, "etcd-key-file", env.KeyFile, "client key for etcd (env ETCD_KEY_FILE)")
	fs.DurationVar(&c.RequestTimeout, "etcd-timeout", DefaultRequestTimeout, "timeout for each datastore operation")
}

// WithDefaults returns c with the defaults in place of zero values.
func (c *Config) WithDefaults() Config {
	out := *c
	// pflag's comma-separated lists keep the blanks after commas.
	out.Endpoints = SplitEndpoints(strings.Join(out.Endpoints, ","))
	if len(out.Endpoints) == 0 {
		out.Endpoints = []string{DefaultEndpoint}
	}
	if out.DialTimeout == 0 {
		out.DialTimeout = DefaultDialTimeout
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = DefaultRequestTimeout
	}
	return out
}

// Validate checks the connection settings: every endpoint is http:// or
// https://, cert and key come together, and TLS files are never given
// with an http:// endpoint (that would silently run in plaintext).
func (c Config) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%w: etcd cert file and key file must be given together", ErrConfig)
	}
	tlsFiles := c.CertFile != "" || c.KeyFile != "" || c.CACertFile != ""
	for _, ep := range c.Endpoints {
		switch {
		case strings.HasPrefix(ep, "https://"):
		case strings.HasPrefix(ep, "http://"):
			if tlsFiles {
				return fmt.Errorf("%w: endpoint %q is plain http but TLS files are given: the connection would not be encrypted; use https://", ErrConfig, ep)
			}
		default:
			return fmt.Errorf("%w: endpoint %q must start with http:// or https://", ErrConfig, ep)
		}
	}
	return nil
}
