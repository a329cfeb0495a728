package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"time"

	"github.com/sirupsen/logrus"
)

var log = logrus.WithField("component", "status")

// ErrInUse means another process already serves the socket.
var ErrInUse = errors.New("status: socket is in use by a running process")

// HTTP paths served on the socket.
const (
	PathPeers   = "/v1/peers"
	PathRoutes  = "/v1/routes"
	PathProcess = "/v1/process"
	// PathProfile + a runtime/pprof profile name (heap, goroutine,
	// allocs, ...): the profile, in pprof's format.
	PathProfile = "/debug/pprof/"
)

// Server answers status requests on a unix socket.
type Server struct {
	path      string
	p         Provider
	policy    func(context.Context) ([]PolicyCounter, error) // nil: not served
	policyLog PolicyLogFunc                                  // nil: not served
	// unreadable lists the unreadable policy records; nil: not served.
	unreadable func() []UnreadableRecord
	reimport   ReimportFunc    // nil: not served
	wireguard  *WireguardFuncs // nil: not served
}

// NewServer returns a server for path (see SocketPath) asking p.
func NewServer(path string, p Provider) *Server {
	return &Server{path: path, p: p}
}

// Run listens on the socket and serves until ctx ends; it removes the
// socket on return. A stale socket left by a dead process is replaced; a
// live one is left alone and ErrInUse returned.
func (s *Server) Run(ctx context.Context) error {
	l, err := Listen(s.path)
	if err != nil {
		return err
	}
	defer os.Remove(s.path)
	// Requests live in ctx: a followed policy log ends with the server.
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(l) }()
	log.WithField("socket", s.path).Info("status socket serving")
	select {
	case <-ctx.Done():
		shCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shCtx)
		<-errCh
		return nil
	case err := <-errCh:
		return fmt.Errorf("status: serving %s: %w", s.path, err)
	}
}

// Listen creates the socket: its directory with mode 0700 if missing,
// the socket itself with mode 0600.
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("status: socket directory: %w", err)
	}
	if _, err := os.Lstat(path); err == nil {
		c, err := net.DialTimeout("unix", path, time.Second)
		if err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s", ErrInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("status: removing stale socket: %w", err)
		}
	}
	// The 0700 directory keeps the socket private until the chmod below;
	// changing the umask instead would race with every other goroutine.
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("status: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("status: chmod socket: %w", err)
	}
	return l, nil
}

// Handler returns the HTTP handler, for tests and for embedding.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathPeers, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.p.Peers(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("GET "+PathRoutes, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.p.Routes(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("GET "+PathProcess, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.p.Process(r.Context())
		reply(w, v, err)
	})
	s.handlePolicy(mux)
	s.handleReimport(mux)
	s.handleWireguard(mux)
	// Go's runtime profiles (heap, goroutine, allocs...), for a memory
	// or goroutine question on a live node, and a CPU profile for a
	// where-does-the-time-go one: root only, like the socket.
	mux.HandleFunc("GET "+PathCPUProfile, serveCPUProfile)
	mux.HandleFunc("GET "+PathProfile+"{name}", func(w http.ResponseWriter, r *http.Request) {
		pprof.Handler(r.PathValue("name")).ServeHTTP(w, r)
	})
	return mux
}

// errorBody is how a failed request reports its error.
type errorBody struct {
	Error string `json:"error"`
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		replyCode(w, http.StatusServiceUnavailable, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// replyCode answers err with the HTTP status code.
func replyCode(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(errorBody{Error: err.Error()})
}
