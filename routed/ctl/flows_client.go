package ctl

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/routed-net/routed/routed/flowagg"
)

// Bounds on reaching the aggregator. A server that accepts TCP but
// never answers (an aggregator whose connection slots are all taken
// keeps new connections in the kernel's accept queue) would otherwise
// hold routedctl flows silently for ever.
const (
	// defaultStepTimeout bounds each step: the TCP connection, the TLS
	// handshake, the answer's headers.
	defaultStepTimeout = 10 * time.Second
	// streamIdleTimeout bounds the silence of a stream: the aggregator
	// writes a keep-alive line every 15 s while following.
	streamIdleTimeout = 45 * time.Second
)

// errNoAnswer is what every stepTimeout is (errors.Is).
var errNoAnswer = errors.New("routedctl flows: the aggregator did not answer in time")

// stepTimeout says which step of reaching the aggregator at addr did
// not end within after, and what may be why.
type stepTimeout struct {
	addr, step, hint string
	after            time.Duration
}

// The steps, each with what may be behind it.
const (
	stepTCP     = "no TCP connection"
	stepTLS     = "no TLS handshake"
	stepHeaders = "no answer to the request"
	stepLine    = "nothing on the stream"

	hintTCP    = "is --server right, and its port-forward running?"
	hintBusy   = "an aggregator whose connection slots are all taken accepts connections and leaves them waiting; is --server the aggregator?"
	hintStuck  = "it took the request and did not answer: is it overloaded, or --server not the aggregator?"
	hintSilent = "the aggregator writes a keep-alive every 15 s: the connection is dead or the aggregator stuck"
)

func (e *stepTimeout) Error() string {
	return fmt.Sprintf("the aggregator at %s did not answer in time: %s within %s (%s)", e.addr, e.step, e.after, e.hint)
}

func (e *stepTimeout) Unwrap() error { return errNoAnswer }

// statusError is an answer other than 200.
type statusError struct {
	addr string
	code int
	msg  string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("the aggregator at %s answered %d %s: %s", e.addr, e.code, http.StatusText(e.code), e.msg)
}

// dialError is a connection or handshake that failed; it names the
// aggregator's address.
type dialError struct{ error }

func (e *dialError) Unwrap() error { return e.error }

// flowsClient reads GET /v1/flows of one aggregator, each step of it
// bounded.
type flowsClient struct {
	base, addr, token string
	tls               *tls.Config
	step, idle        time.Duration
	hc                *http.Client
}

// newFlowsClient checks rc and sets up its client; step bounds each
// step of a request (0: defaultStepTimeout).
func newFlowsClient(rc flowagg.ReaderConfig, step time.Duration) (*flowsClient, error) {
	if rc.URL == "" || rc.Token == "" {
		return nil, fmt.Errorf("%w: the aggregator URL and a reader token are required", flowagg.ErrConfig)
	}
	u, err := url.Parse(rc.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: the aggregator URL %q is not https://HOST:PORT: the reader token would travel in clear (the aggregator serves HTTPS only)", flowagg.ErrConfig, rc.URL)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: u.Hostname()}
	if rc.CAFile != "" {
		pem, err := os.ReadFile(rc.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the aggregator's CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", flowagg.ErrConfig, rc.CAFile)
		}
	}
	if step <= 0 {
		step = defaultStepTimeout
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "443")
	}
	c := &flowsClient{base: strings.TrimRight(rc.URL, "/"), addr: addr, token: rc.Token, tls: tc, step: step, idle: streamIdleTimeout}
	// Keep-alive stays on. Without it each request says "Connection:
	// close", and aggregators before the lingering close
	// (routed/flowagg/linger.go) answered the client's TLS close_notify
	// on such a connection with a reset; `kubectl port-forward`, the
	// documented way in, exits on a reset from the pod ("lost connection
	// to pod"). stream drops idle connections before each request
	// instead, so a reconnection after the aggregator restarted never
	// tries a dead one.
	c.hc = &http.Client{Transport: &http.Transport{DialTLSContext: c.dialTLS}}
	return c, nil
}

// dialTLS connects and shakes hands, each step within c.step.
func (c *flowsClient) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: c.step, KeepAlive: 15 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		var ne net.Error
		if ctx.Err() == nil && errors.As(err, &ne) && ne.Timeout() {
			return nil, &stepTimeout{addr: c.addr, step: stepTCP, hint: hintTCP, after: c.step}
		}
		return nil, &dialError{fmt.Errorf("connecting to the aggregator: %w", err)} // err names the address
	}
	hctx, cancel := context.WithTimeout(ctx, c.step)
	defer cancel()
	tconn := tls.Client(conn, c.tls)
	if err := tconn.HandshakeContext(hctx); err != nil {
		conn.Close()
		if ctx.Err() == nil && errors.Is(hctx.Err(), context.DeadlineExceeded) {
			return nil, &stepTimeout{addr: c.addr, step: stepTLS, hint: hintBusy, after: c.step}
		}
		return nil, &dialError{fmt.Errorf("TLS with the aggregator at %s: %w", c.addr, err)}
	}
	return tconn, nil
}

// stream asks for GET /v1/flows?q and gives each entry to fn until the
// stream ends (nil), breaks or fn fails. connected is called once the
// aggregator answered 200. The answer's headers must come within
// c.step, and each line (entries, keep-alives) within c.idle of the
// last.
func (c *flowsClient) stream(ctx context.Context, q url.Values, connected func(), fn func(flowagg.Entry) error) error {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var timer stepTimer
	defer timer.stop()
	bound := func(step, hint string, d time.Duration) {
		timer.set(d, func() { cancel(&stepTimeout{addr: c.addr, step: step, hint: hint, after: d}) })
	}
	// The headers' bound starts when the request is written: the TCP
	// and TLS steps are bounded on their own.
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) {
		timer.awaitAnswer(c.step, func() { cancel(&stepTimeout{addr: c.addr, step: stepHeaders, hint: hintStuck, after: c.step}) })
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(rctx, trace), http.MethodGet, c.base+"/v1/flows?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("routedctl flows: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	c.hc.CloseIdleConnections()
	resp, err := c.hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is the address the error names already
		}
		return c.cause(rctx, err)
	}
	defer resp.Body.Close()
	timer.answered()
	if resp.StatusCode != http.StatusOK {
		bound(stepHeaders, hintStuck, c.step)
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &statusError{addr: c.addr, code: resp.StatusCode, msg: strings.TrimSpace(string(msg))}
	}
	connected()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	// Only the wait for the network is bounded, not fn: a reader paging
	// through the output holds the stream as long as it likes.
	for bound(stepLine, hintSilent, c.idle); sc.Scan(); bound(stepLine, hintSilent, c.idle) {
		timer.stop()
		var e flowagg.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("a line from the aggregator at %s: %w", c.addr, err)
		}
		if e.Flow == nil && e.Gap == nil {
			continue // keep-alive
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return c.cause(rctx, err)
	}
	var st *stepTimeout
	if errors.As(context.Cause(rctx), &st) {
		return st // cut by a bound: not the stream's end, however the body read it
	}
	return nil
}

// cause is err, or the step that timed out when that is why the
// request ended.
func (c *flowsClient) cause(rctx context.Context, err error) error {
	var st *stepTimeout
	if errors.As(context.Cause(rctx), &st) {
		return st
	}
	if errors.As(err, &st) {
		return st
	}
	if rctx.Err() != nil {
		return rctx.Err()
	}
	var de *dialError
	if errors.As(err, &de) {
		return de
	}
	return fmt.Errorf("reading from the aggregator at %s: %w", c.addr, err)
}

// retryable says whether following should reconnect after err: the
// aggregator gone, restarting, overloaded or silent; not a refusal a
// retry would meet again (the token, the filter, its certificate).
func retryable(err error) bool {
	var se *statusError
	if errors.As(err, &se) {
		return se.code >= 500 || se.code == http.StatusTooManyRequests || se.code == http.StatusRequestTimeout
	}
	var ce *tls.CertificateVerificationError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var ie x509.CertificateInvalidError
	var je *json.SyntaxError
	return !errors.As(err, &ce) && !errors.As(err, &ue) && !errors.As(err, &he) && !errors.As(err, &ie) && !errors.As(err, &je) &&
		!errors.Is(err, flowagg.ErrConfig)
}

// stepTimer runs one bound at a time; set replaces the running one.
// awaitAnswer is called from the transport's goroutine once the request
// is written, which may be after the answer came (answered): then it
// does nothing.
type stepTimer struct {
	mu     sync.Mutex
	t      *time.Timer
	answer bool
}

func (s *stepTimer) awaitAnswer(d time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.answer {
		s.t = time.AfterFunc(d, f)
	}
}

func (s *stepTimer) answered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answer = true
	if s.t != nil {
		s.t.Stop()
	}
}

func (s *stepTimer) set(d time.Duration, f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t != nil {
		s.t.Stop()
	}
	s.t = time.AfterFunc(d, f)
}

func (s *stepTimer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.t != nil {
		s.t.Stop()
	}
}
