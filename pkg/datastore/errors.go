package datastore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/routed-net/routed/internal/backoff"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore/dsconfig"
)

// Sentinel errors; test with errors.Is.
var (
	ErrNotFound = errors.New("datastore: not found")
	ErrExists   = errors.New("datastore: already exists")
	// ErrConflict means the object changed since it was read.
	ErrConflict = errors.New("datastore: conflict: the resource was modified since it was read")
	// ErrUnavailable means etcd could not be reached in time.
	ErrUnavailable = errors.New("datastore: etcd unreachable")
	// ErrConfig means the connection settings are unusable.
	ErrConfig = dsconfig.ErrConfig
)

// ObjectError says which object an error is about, keeping the sentinel
// for errors.Is.
type ObjectError struct {
	Kind api.Kind
	Name string
	Err  error
}

func (e *ObjectError) Error() string {
	return fmt.Sprintf("%s %q: %v", e.Kind, e.Name, e.Err)
}

// Unwrap returns the sentinel.
func (e *ObjectError) Unwrap() error { return e.Err }

func objErr(k api.Kind, name string, err error) error {
	return &ObjectError{Kind: k, Name: name, Err: err}
}

// wrap turns a failed etcd call into ErrUnavailable when the cause is a
// dead or unreachable etcd, naming each endpoint and why it failed.
func (c *Client) wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || unavailableCode(err) {
		desc, answering := c.probe()
		err = fmt.Errorf("%w: %s (%w)", ErrUnavailable, desc, err)
		if answering {
			err = membersUp{err}
		}
		return err
	}
	return err
}

// unavailableCode reports gRPC errors that mean "etcd cannot serve now":
// no connection, no leader (or a new one elected while the request was
// pending: etcd did not apply it), or the deadline passing on the server
// side.
func unavailableCode(err error) bool {
	if errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader) ||
		errors.Is(err, rpctypes.ErrLeaderChanged) || errors.Is(err, rpctypes.ErrGRPCLeaderChanged) ||
		// "request timed out" while an election runs: not applied, or
		// applied and then seen as ErrExists by a keyed retry.
		errors.Is(err, rpctypes.ErrTimeout) || errors.Is(err, rpctypes.ErrGRPCTimeout) ||
		errors.Is(err, rpctypes.ErrTimeoutDueToLeaderFail) || errors.Is(err, rpctypes.ErrGRPCTimeoutDueToLeaderFail) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// membersUp marks an ErrUnavailable for which at least one member
// accepted a connection (and its TLS handshake): etcd is there but did
// not answer, as during an election or while a loaded member catches up,
// not cut off from this node. RetryUnavailable rides it out longer.
type membersUp struct{ error }

func (e membersUp) Unwrap() error { return e.error }

// probe dials every endpoint at once and describes which are
// unreachable; answering is true when at least one accepted the
// connection (and its TLS handshake).
func (c *Client) probe() (desc string, answering bool) {
	parts := make([]string, len(c.cfg.Endpoints))
	up := make([]bool, len(c.cfg.Endpoints))
	var wg sync.WaitGroup
	for i, ep := range c.cfg.Endpoints {
		wg.Go(func() { parts[i], up[i] = c.probeOne(ep) })
	}
	wg.Wait()
	return strings.Join(parts, "; "), slices.Contains(up, true)
}

func (c *Client) probeOne(ep string) (string, bool) {
	host := ep
	if u, err := url.Parse(ep); err == nil && u.Host != "" {
		host = u.Host
	}
	conn, err := net.DialTimeout("tcp", host, probeDialTimeout)
	if err != nil {
		return fmt.Sprintf("%s: %v", ep, err), false
	}
	defer conn.Close()
	if strings.HasPrefix(ep, "https://") {
		if err := c.probeTLS(conn, host); err != nil {
			return fmt.Sprintf("%s: TLS: %v", ep, err), false
		}
	}
	return fmt.Sprintf("%s: reachable but did not answer in %s", ep, c.cfg.RequestTimeout), true
}

// probeDialTimeout bounds the probe's connect and TLS handshake. A
// member that is up completes both in milliseconds, but on a node
// starved of CPU (128 CNI plugins started at once at load 60) the
// prober itself may not run for hundreds of milliseconds: with 500 ms,
// 3 of 512 parallel ADDs were told their local etcd was unreachable
// ("dial tcp 127.0.0.1:...: i/o timeout") and gave up after
// UnavailableRideOut instead of riding out ElectionRideOut.
const probeDialTimeout = 2 * time.Second

// probeReadWait is how long probeTLS waits, after the handshake, for a
// late rejection of the client certificate.
const probeReadWait = 500 * time.Millisecond

// probeTLS shakes hands as the etcd client would, so that an untrusted
// server or a missing or rejected client certificate is reported as such
// rather than as an endpoint that "did not answer".
func (c *Client) probeTLS(raw net.Conn, host string) error {
	cfg := &tls.Config{} // clientv3 also uses the system roots then
	if c.tls != nil {
		cfg = c.tls.Clone()
	}
	if cfg.ServerName == "" {
		cfg.ServerName, _, _ = net.SplitHostPort(host)
	}
	conn := tls.Client(raw, cfg)
	if err := conn.SetDeadline(time.Now().Add(probeDialTimeout)); err != nil {
		return err
	}
	if err := conn.Handshake(); err != nil {
		return err
	}
	if err := conn.SetDeadline(time.Now().Add(probeReadWait)); err != nil {
		return err
	}
	// In TLS 1.3 the server checks the client certificate after the
	// client has finished its side; a rejection arrives on the first read.
	// Silence until the deadline means the server accepted us.
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			return nil
		}
		return err
	}
	return nil
}

// UnavailableRideOut is how long RetryUnavailable keeps retrying while
// no member accepts a connection: an etcd that is down or cut off from
// this node (a CNI ADD must then fail in seconds, naming etcd, not hang).
const UnavailableRideOut = 10 * time.Second

// ElectionRideOut is how long RetryUnavailable keeps retrying while some
// member accepts connections but none answers in time: an election, or
// members catching up after one. On a loaded node with dozens of plugins
// reconnecting at once that outlasts UnavailableRideOut (a leader kill
// during 64 parallel ADDs saw ADDs fail after 25 s of it); it stays well
// inside the runtime's CNI timeout (kubelet's is 2 minutes).
const ElectionRideOut = 30 * time.Second

// rideOut is how long RetryUnavailable keeps retrying after err.
func rideOut(err error) time.Duration {
	if errors.As(err, new(membersUp)) {
		return ElectionRideOut
	}
	return UnavailableRideOut
}

// RetryUnavailable runs f until it succeeds, fails with an error other
// than ErrUnavailable, the ride-out has passed (UnavailableRideOut, or
// ElectionRideOut while members accept connections), or ctx ends, and
// returns f's last error (never ctx's, so the caller still learns that
// etcd was unreachable). An etcd election or a member lost mid-request
// is a few seconds of ErrUnavailable; a caller whose operation is safe to
// repeat rides it out.
func RetryUnavailable(ctx context.Context, f func() error) error {
	b := backoff.New(200*time.Millisecond, 2*time.Second)
	start := time.Now()
	for {
		err := f()
		if err == nil || !errors.Is(err, ErrUnavailable) {
			return err
		}
		if time.Since(start) > rideOut(err) || !b.Wait(ctx) {
			return err
		}
	}
}
