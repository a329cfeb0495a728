package datastore

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// tlsProbeTimeout bounds each endpoint's handshake in tlsProblem.
const tlsProbeTimeout = 2 * time.Second

// tlsProblem says why no endpoint completes a TLS handshake with
// tlsCfg, "" when one does or none was reached at all: etcd's client
// reports a server certificate it cannot verify (a wrong CA file, a
// name the certificate lacks) only as a dial that never ends, and an
// operator must read the certificate error, not "did not answer".
func tlsProblem(ctx context.Context, cfg Config, tlsCfg *tls.Config) string {
	var probs []string
	for _, ep := range cfg.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
		var conn net.Conn
		if cfg.Dialer != nil {
			conn, err = cfg.Dialer(dctx, "tcp", u.Host)
		} else {
			conn, err = (&net.Dialer{}).DialContext(dctx, "tcp", u.Host)
		}
		if err != nil {
			cancel()
			continue // unreachable: not a TLS problem
		}
		c := tlsCfg.Clone()
		if c.ServerName == "" {
			c.ServerName = u.Hostname()
		}
		tc := tls.Client(conn, c)
		err = tc.HandshakeContext(dctx)
		cancel()
		tc.Close()
		if err == nil {
			return ""
		}
		probs = append(probs, fmt.Sprintf("TLS handshake with %s: %v", ep, err))
	}
	return strings.Join(probs, "; ")
}
