package flowagg

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	_ "embed" // the page
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/policy/flowrec"
)

//go:embed web/index.html
var indexHTML []byte

// The pages' Content-Security-Policies, allowing their own inline
// script and style by hash.
var (
	indexCSP = pageCSP(indexHTML)
	loginCSP = pageCSP([]byte(loginPage))
)

// Config configures the aggregator.
type Config struct {
	// Listen is the address of the HTTPS listener (":9443").
	Listen string
	// CertFile and KeyFile are the server's certificate; ClientCAFile
	// the CA whose client certificates identify nodes (the cluster's
	// etcd CA: a node sends with its routed-node certificate).
	CertFile, KeyFile, ClientCAFile string
	// TokenFile holds the readers' token (routedctl flows, the page).
	TokenFile string
	// NodeIdentities are client certificate common names that may send
	// any node's batches (nil: routed-node, the shared node identity of
	// docs/etcd-rbac.md; empty: none, every node with its own
	// certificate). Any other verified name may send only the batches
	// of the node of that name.
	NodeIdentities []string
	// ReadTimeout bounds reading a request, body included (0: 30 s;
	// a follower's stream only writes, and outlives it); IdleTimeout
	// closes idle keep-alive connections (0: 60 s).
	ReadTimeout, IdleTimeout time.Duration
	// WriteTimeout bounds writing a response, and each write of a
	// reader's stream (0: 30 s): a reader that stops reading is
	// dropped, and lets go of what it was sent.
	WriteTimeout time.Duration
	// MaxConns bounds the nodes' connections (0: MaxConns),
	// MaxReaderConns the signed-in readers' (0: MaxReaderConns) and
	// MaxPendingConns those not yet authenticated (0: MaxPendingConns).
	MaxConns, MaxReaderConns, MaxPendingConns int
	// MaxEntries and MaxAge bound the window (0: 100,000 and 1 h).
	MaxEntries int
	MaxAge     time.Duration
}

// ErrConfig is returned for an unusable Config.
var ErrConfig = errors.New("flowagg: invalid configuration")

// Server holds the window and serves it.
type Server struct {
	cfg    Config
	token  []byte
	window *Window
	log    *logrus.Entry
	// batchSlots bounds the batch requests decoded at once,
	// batchNodes to one a node.
	batchSlots chan struct{}
	batchNodes batchNodes
	// sessions are the page's, created by the sign-in form.
	sessions sessions
	// conns are Serve's connection budgets (nil: served otherwise).
	conns *connLimit
	// streams counts the GET /v1/flows being served.
	streams atomic.Int64
}

// NewServer reads the token and sets up the window.
func NewServer(cfg Config) (*Server, error) {
	if cfg.TokenFile == "" {
		return nil, fmt.Errorf("%w: a token file is required (readers are never anonymous)", ErrConfig)
	}
	tok, err := os.ReadFile(cfg.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("flowagg: token file: %w", err)
	}
	tok = []byte(strings.TrimSpace(string(tok)))
	if len(tok) < 16 {
		return nil, fmt.Errorf("%w: token file %s: the token must be at least 16 characters", ErrConfig, cfg.TokenFile)
	}
	if cfg.MaxEntries == 0 {
		cfg.MaxEntries = 100_000
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = time.Hour
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = MaxConns
	}
	if cfg.MaxReaderConns == 0 {
		cfg.MaxReaderConns = MaxReaderConns
	}
	if cfg.MaxPendingConns == 0 {
		cfg.MaxPendingConns = MaxPendingConns
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	if cfg.NodeIdentities == nil {
		cfg.NodeIdentities = []string{"routed-node"}
	}
	return &Server{cfg: cfg, token: tok, window: NewWindow(cfg.MaxEntries, cfg.MaxAge), batchSlots: make(chan struct{}, MaxConcurrentBatches), log: logrus.WithField("component", "flowagg")}, nil
}

// Window is the server's window.
func (s *Server) Window() *Window { return s.window }

// TLSConfig is the listener's: the server certificate, and client
// certificates verified against ClientCAFile when given (required for
// sending batches, which the handler checks).
func (s *Server) TLSConfig() (*tls.Config, error) {
	if s.cfg.CertFile == "" || s.cfg.KeyFile == "" || s.cfg.ClientCAFile == "" {
		return nil, fmt.Errorf("%w: cert, key and client CA files are required (nodes send over mutual TLS)", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("flowagg: server certificate: %w", err)
	}
	pem, err := os.ReadFile(s.cfg.ClientCAFile)
	if err != nil {
		return nil, fmt.Errorf("flowagg: client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: client CA file %s holds no PEM certificate", ErrConfig, s.cfg.ClientCAFile)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}, nil
}

// Run serves HTTPS on cfg.Listen until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	tc, err := s.TLSConfig()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("flowagg: listen: %w", err)
	}
	return s.Serve(ctx, TLSListener(ln, tc))
}

// Serve serves on a TLS listener (Run's is TLSListener's) until ctx
// ends, within the connection budgets (limitlisten.go); a request must
// arrive within ReadTimeout. A Server serves one listener.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	lim := limitConns(ln, s.cfg.MaxPendingConns, s.cfg.MaxConns, s.cfg.MaxReaderConns)
	s.conns = lim
	ln = lim
	srv := &http.Server{Handler: s.Handler(), ConnState: lim.connState, ConnContext: lim.connContext, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: s.cfg.ReadTimeout, WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout, MaxHeaderBytes: 16 << 10}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	s.log.WithField("addr", ln.Addr().String()).Info("flowagg: serving")
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("flowagg: serve: %w", err)
	}
	return nil
}

// Handler serves POST /v1/nodes/{node}/batches (nodes, mutual TLS), GET /v1/flows
// (readers, token) and the page (/, its login form at POST /login,
// POST /logout to end its session).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/{node}/batches", s.postBatch)
	mux.HandleFunc("GET /v1/flows", s.reader(s.getFlows))
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		mux.ServeHTTP(w, r)
	})
}

// nodeIdentity is the common name of a verified client certificate.
func nodeIdentity(r *http.Request) (string, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return "", false
	}
	return r.TLS.VerifiedChains[0][0].Subject.CommonName, true
}

// postBatch takes a node's batch at /v1/nodes/{node}/batches. The node
// is in the path so the sender's identity is checked before a byte of
// the body is read; the body is then decoded as a stream within
// MaxBatchBytes, MaxBatchFlows and BatchBodyTimeout, at most
// MaxConcurrentBatches at once and one a node.
func (s *Server) postBatch(w http.ResponseWriter, r *http.Request) {
	id, ok := nodeIdentity(r)
	if !ok {
		refuseUnread(w, "flowagg: batches need a client certificate of the cluster CA", http.StatusUnauthorized)
		return
	}
	node := r.PathValue("node")
	switch {
	case !validName(node):
		refuseUnread(w, fmt.Sprintf("flowagg: node %q in the path is not a DNS-1123 name", node), http.StatusBadRequest)
		return
	case !slices.Contains(s.cfg.NodeIdentities, id) && id != node:
		refuseUnread(w, fmt.Sprintf("flowagg: identity %q may not send node %q's flows", id, node), http.StatusForbidden)
		return
	case !s.promote(r, classNode, node):
		w.Header().Set("Retry-After", "1")
		refuseUnread(w, fmt.Sprintf("flowagg: the nodes' connections are all taken (%d, %d for node %q); send again", s.cfg.MaxConns, MaxConnsPerNode, node), http.StatusServiceUnavailable)
		return
	}
	if !s.batchNodes.take(node) {
		w.Header().Set("Retry-After", "1")
		refuseUnread(w, fmt.Sprintf("flowagg: a batch of node %q is being taken already; send again", node), http.StatusServiceUnavailable)
		return
	}
	defer s.batchNodes.give(node)
	select {
	case s.batchSlots <- struct{}{}:
		defer func() { <-s.batchSlots }()
	default:
		w.Header().Set("Retry-After", "1")
		refuseUnread(w, fmt.Sprintf("flowagg: %d batches are being taken already; send again", MaxConcurrentBatches), http.StatusServiceUnavailable)
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(BatchBodyTimeout))
	var b flowrec.Batch
	if err := decodeBatch(http.MaxBytesReader(w, r.Body, MaxBatchBytes), &b); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) || errors.Is(err, errBatchTooLarge) {
			refuseUnread(w, fmt.Sprintf("flowagg: batch of node %q: %v (at most %d flows, %d bytes: split it)", node, err, MaxBatchFlows, MaxBatchBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, fmt.Sprintf("flowagg: batch of node %q: %v", node, err), http.StatusBadRequest)
		return
	}
	switch {
	case b.Node != node:
		http.Error(w, fmt.Sprintf("flowagg: batch: node %q differs from the path's %q", b.Node, node), http.StatusBadRequest)
		return
	case b.Boot == "" || b.Seq == 0:
		http.Error(w, "flowagg: batch: boot and seq are required", http.StatusBadRequest)
		return
	}
	for k := range b.Dropped {
		if !slices.Contains(flowrec.DropReasons, k) {
			http.Error(w, fmt.Sprintf("flowagg: batch of node %q: dropped: %q is not a drop reason (%s)", node, k, strings.Join(flowrec.DropReasons, ", ")), http.StatusBadRequest)
			return
		}
	}
	for i := range b.Flows {
		b.Flows[i].Node = b.Node
	}
	if err := s.window.Add(b); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// promote moves r's connection to class's budget (limitlisten.go).
func (s *Server) promote(r *http.Request, class connClass, node string) bool {
	return s.conns == nil || s.conns.promote(r, class, node)
}

// admitReader moves an authorized reader's connection to the readers'
// budget, or refuses the request (false) when it is full.
func (s *Server) admitReader(w http.ResponseWriter, r *http.Request) bool {
	if s.promote(r, classReader, "") {
		return true
	}
	w.Header().Set("Retry-After", "1")
	refuseUnread(w, fmt.Sprintf("flowagg: the readers' connections are all taken (%d)", s.cfg.MaxReaderConns), http.StatusServiceUnavailable)
	return false
}

// refuseUnread answers a request whose body was not read and closes
// the connection: net/http would otherwise read up to 256 KiB of the
// body before answering, and wait on a sender that trickles it.
func refuseUnread(w http.ResponseWriter, msg string, code int) {
	w.Header().Set("Connection", "close")
	http.Error(w, msg, code)
}

// authorized: the token as a bearer token, or the page's session
// cookie.
func (s *Server) authorized(r *http.Request) bool {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(tok), s.token) == 1
	}
	c, err := r.Cookie(sessionCookie)
	return err == nil && s.sessions.valid(c.Value, time.Now())
}

func (s *Server) reader(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			http.Error(w, "flowagg: a reader's token is required", http.StatusUnauthorized)
			return
		}
		if !s.admitReader(w, r) {
			return
		}
		h(w, r)
	}
}

// getFlows writes the window's entries that pass the filter as JSON
// lines; with follow=1 it goes on writing new ones until the client
// leaves. Each write must end within WriteTimeout: a reader that stops
// reading would otherwise hold the entries it was sent, evicted from
// the window or not, for as long as its connection lasts.
func (s *Server) getFlows(w http.ResponseWriter, r *http.Request) {
	f, err := ParseFilter(r.URL.Query(), time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.streams.Add(1)
	defer s.streams.Add(-1)
	follow := r.URL.Query().Get("follow") == "1"
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	// The server's WriteTimeout is from the request's start: each write
	// of the stream moves it on, the last for the response's end.
	rc := http.NewResponseController(w)
	deadline := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout)) }
	defer deadline()
	enc := json.NewEncoder(w)
	var seq uint64
	for {
		// A session may end (sign-out, expiry) while it follows: the
		// stream ends with it, at sign-out at once, at expiry within the
		// 15 s keep-alive.
		ended := s.sessions.ended()
		if !s.authorized(r) {
			return
		}
		entries, last, more := s.window.After(seq, f.Keep)
		for i := range entries {
			deadline()
			if err := enc.Encode(&entries[i]); err != nil {
				return
			}
		}
		seq = last
		if !follow {
			return
		}
		deadline()
		if rc.Flush() != nil {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-more:
		case <-ended:
		case <-time.After(15 * time.Second):
			// a keep-alive line, so proxies and port-forwards hold on
			deadline()
			if _, err := w.Write([]byte("{}\n")); err != nil {
				return
			}
		}
	}
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) {
		setPageHeaders(w.Header(), loginCSP)
		_, _ = w.Write([]byte(loginPage))
		return
	}
	if !s.admitReader(w, r) {
		return
	}
	setPageHeaders(w.Header(), indexCSP)
	_, _ = w.Write(indexHTML)
}

// maxLoginBody bounds the sign-in form (a token is well under 1 KiB).
const maxLoginBody = 4 << 10

// login checks the token from the form and starts a session: an
// HttpOnly, Secure, SameSite=Strict cookie holding a random session id
// that expires after SessionMaxAge (the token itself stays here).
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "application/x-www-form-urlencoded" {
		refuseUnread(w, "flowagg: sign in with the form (application/x-www-form-urlencoded)", http.StatusUnsupportedMediaType)
		return
	}
	// The form is anonymous: its connection is pending, and must not
	// hold its slot for the whole ReadTimeout.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(pendingBodyTimeout))
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		code := http.StatusBadRequest
		if mb := (*http.MaxBytesError)(nil); errors.As(err, &mb) {
			code = http.StatusRequestEntityTooLarge
		}
		refuseUnread(w, fmt.Sprintf("flowagg: the sign-in form: %v (at most %d bytes)", err, maxLoginBody), code)
		return
	}
	tok := r.PostForm.Get("token")
	if subtle.ConstantTimeCompare([]byte(tok), s.token) != 1 {
		setPageHeaders(w.Header(), loginCSP)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(strings.Replace(loginPage, "<!--msg-->", `<p id="error">wrong token</p>`, 1)))
		return
	}
	http.SetCookie(w, sessionCookieFor(s.sessions.create(time.Now()), int(SessionMaxAge/time.Second)))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// logout ends the page's session and clears its cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.sessions.end(c.Value)
	}
	http.SetCookie(w, sessionCookieFor("", -1))
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

const loginPage = `<!doctype html><html><head><meta charset="utf-8"><title>routed flows: sign in</title>
<style>body{font-family:sans-serif}</style></head>
<body><h1>routed flows</h1><!--msg-->
<form method="post" action="/login"><label>Token <input id="token" name="token" type="password" autocomplete="off"></label>
<button id="signin" type="submit">Sign in</button></form>
<p>The token is the aggregator's (its --token-file); reach the aggregator with kubectl port-forward.</p></body></html>`
