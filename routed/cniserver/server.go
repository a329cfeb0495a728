// Package cniserver is routed's CNI service: on a root-only unix socket
// (pkg/cniapi) it assigns a pod's addresses from the node's blocks and
// writes its WorkloadEndpoint in one etcd transaction, and releases both
// in one on DEL, with a long-lived IPAM client whose caches hold the
// node's blocks and handles. The CNI plugins use it when it is there and
// do the same work themselves, through routed-ipam's logic, when not.
//
// Invariant: routed and a plugin never assign or release on one host at
// the same time. Every assignment and release, whoever runs it, holds
// the host IPAM lock, an flock(2) on ipam_lock_file, from its first read
// to its commit. The service locks the path the plugin's own netconf
// names (it runs routed-ipam's code, ipamcore, on the plugin's stdin)
// and, before reading anything, checks that the file it locked is the
// plugin's by device and inode (cniapi.Request.LockDev/LockIno): a
// different file (routed's mount lacks the plugin's directory) makes
// the plugin fall back and lock it itself. The kernel drops the lock of
// a process that dies, so a killed routed blocks nobody; a plugin that
// lost its request mid-way falls back and waits for the lock while
// routed still holds it, then finds the work done (everything is keyed
// by the handle and the endpoint name).
package cniserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/cniplugin/ipamcore"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/cniapi"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/status"
)

var log = logrus.WithField("component", "cniserver")

// Config is what the server needs.
type Config struct {
	Socket string // cniapi.DefaultSocket
	Node   string
	DS     *datastore.Client
	// IPAM is the server's own long-lived client. It must be made with
	// ipam.WithWatchedPools and the server subscribed to the node feed
	// (Kinds), or the pools must never change while it runs (tests).
	IPAM *ipam.Client
	// Held reports whether the datastore is not trusted (routed/identity):
	// the server then writes nothing and says why.
	Held func() (bool, string)
}

// Server serves the CNI socket.
type Server struct {
	cfg  Config
	weps endpointRevs
}

// New returns a server; Run serves it.
func New(cfg Config) *Server {
	if cfg.Socket == "" {
		cfg.Socket = cniapi.DefaultSocket
	}
	if cfg.Held == nil {
		cfg.Held = func() (bool, string) { return false, "" }
	}
	return &Server{cfg: cfg}
}

// Kinds are what the server takes from the node feed: what decides which
// pools may serve this node.
var Kinds = []api.Kind{api.KindIPPool, api.KindIPAMConfiguration, api.KindNode, api.KindIPReservation}

// OnBatch drops the IPAM client's pool view and node labels when any of
// them change, so that they are read again (feed.Consumer).
func (s *Server) OnBatch(b feed.Batch) {
	for _, u := range b.Updates {
		if b.Snapshot || u.Kind != api.KindNode || u.Name == s.cfg.Node {
			s.cfg.IPAM.Invalidate()
			return
		}
	}
}

// Run serves until ctx ends and removes the socket on return.
func (s *Server) Run(ctx context.Context) error {
	l, err := Listen(s.cfg.Socket)
	if err != nil {
		return err
	}
	defer os.Remove(s.cfg.Socket)
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(rootOnly{l.(*net.UnixListener)}) }()
	log.WithField("socket", s.cfg.Socket).Info("CNI socket serving")
	select {
	case <-ctx.Done():
		// Requests in flight finish (they hold the host lock and are
		// bounded by their budget); new ones find no socket and fall back.
		_ = os.Remove(s.cfg.Socket)
		shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shCtx)
		<-errCh
		return nil
	case err := <-errCh:
		return fmt.Errorf("cniserver: serving %s: %w", s.cfg.Socket, err)
	}
}

// Listen creates the socket (mode 0600, its directory 0700 if missing,
// status.Listen) and refuses a directory that others could write to or
// that root does not own: whoever can replace the socket could answer
// the plugin's requests.
func Listen(path string) (net.Listener, error) {
	l, err := status.Listen(path)
	if err != nil {
		return nil, fmt.Errorf("cniserver: %w", err)
	}
	var st unix.Stat_t
	dir := filepath.Dir(path)
	if err := unix.Lstat(dir, &st); err != nil {
		l.Close()
		return nil, fmt.Errorf("cniserver: socket directory %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		l.Close()
		return nil, fmt.Errorf("cniserver: socket directory %s must be a directory owned by uid %d and writable by nobody else (mode %#o, uid %d)", dir, os.Geteuid(), st.Mode&0o7777, st.Uid)
	}
	return l, nil
}

// rootOnly accepts connections only from processes of routed's own user
// (root), checked with SO_PEERCRED: the socket's mode already keeps
// others out; this holds even if it is loosened.
type rootOnly struct{ *net.UnixListener }

func (r rootOnly) Accept() (net.Conn, error) {
	for {
		c, err := r.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if uid, err := peerUID(c); err != nil || uid != os.Geteuid() {
			log.WithError(err).WithField("uid", uid).Warn("refused a CNI socket connection from another user")
			c.Close()
			continue
		}
		return c, nil
	}
}

func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	uid := -1
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			cerr = err
			return
		}
		uid = int(cred.Uid)
	})
	return uid, errors.Join(err, cerr)
}

// Handler serves the protocol (also for tests).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+cniapi.PathAdd, s.serveAdd)
	mux.HandleFunc("POST "+cniapi.PathDel, s.serveDel)
	return mux
}

// errFallback marks a request this server will not serve (another node's
// name, the plugin's lock file not reachable here): the plugin does it.
var errFallback = errors.New("cniserver: not for this routed")

// errHeld: the datastore is not trusted (CNI code 11).
var errHeld = errors.New("cniserver: routed holds every datastore write")

// prepare decodes a request and returns routed-ipam's logic for it, over
// the server's IPAM client and locking the plugin's lock file.
func (s *Server) prepare(r *http.Request) (*cniapi.Request, *ipamcore.IPAM, *logrus.Entry, error) {
	var req cniapi.Request
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		return nil, nil, nil, fmt.Errorf("%w: bad request: %w", ipamcore.ErrConfig, err)
	}
	lg := log.WithFields(logrus.Fields{"containerID": req.ContainerID, "network": req.Network})
	if req.Pod != "" {
		lg = lg.WithField("pod", req.Namespace+"/"+req.Pod)
	}
	if req.Node != s.cfg.Node {
		return nil, nil, lg, fmt.Errorf("%w: the plugin asks for node %q, this routed is node %q", errFallback, req.Node, s.cfg.Node)
	}
	if held, why := s.cfg.Held(); held {
		return nil, nil, lg, fmt.Errorf("%w on node %s: %s", errHeld, s.cfg.Node, why)
	}
	conf, err := ipamcore.ParseConf(req.Stdin)
	if err != nil {
		return nil, nil, lg, err
	}
	m := ipamcore.NewShared(s.cfg.DS, s.cfg.IPAM, conf, lg, ipamcore.CheckLockFileID(req.LockDev, req.LockIno))
	return &req, m, lg, nil
}

func (s *Server) serveAdd(w http.ResponseWriter, r *http.Request) {
	req, m, lg, err := s.prepare(r)
	if err != nil {
		s.fail(w, lg, "ADD", err)
		return
	}
	a := ipamcore.Assignment{
		Network: req.Network, ContainerID: req.ContainerID, Node: req.Node,
		Namespace: req.Namespace, Pod: req.Pod, RuntimeIPs: req.RuntimeIPs, ArgsIPs: req.ArgsIPs,
	}
	var put *ipamcore.EndpointPut
	var del *ipamcore.EndpointDel
	if len(req.Endpoint) > 0 {
		wep := new(api.WorkloadEndpoint)
		if err := json.Unmarshal(req.Endpoint, wep); err != nil {
			s.fail(w, lg, "ADD", fmt.Errorf("%w: bad request: endpoint: %w", ipamcore.ErrConfig, err))
			return
		}
		if err := s.checkEndpoint(req, wep); err != nil {
			s.fail(w, lg, "ADD", err)
			return
		}
		put = ipamcore.NewEndpointPut(wep)
		del = s.weps.deleter(wep.Metadata.Name, req.ContainerID)
		a.Extra, a.Undo = put, del
	}
	addrs, err := m.Add(r.Context(), a)
	if err != nil {
		if del != nil {
			s.weps.forget(del.Key())
		}
		s.fail(w, lg, "ADD", err)
		return
	}
	reply := cniapi.AddReply{IPs: addrs}
	if put != nil {
		reply.EndpointRevision = fmt.Sprint(put.Rev())
		s.weps.put(del.Key(), req.ContainerID, put.Rev())
	}
	writeJSON(w, http.StatusOK, reply)
}

// checkEndpoint refuses an endpoint that is not the request's.
func (s *Server) checkEndpoint(req *cniapi.Request, wep *api.WorkloadEndpoint) error {
	handle := ipam.PodHandle(req.Network, req.ContainerID)
	if wep.Kind != api.KindWorkloadEndpoint || wep.Spec.Node != req.Node || wep.Spec.ContainerID != req.ContainerID || wep.Spec.Handle != handle {
		return fmt.Errorf("%w: the endpoint (kind %q, node %q, container %q, handle %q) is not the request's (node %q, container %q, handle %q)",
			ipamcore.ErrConfig, wep.Kind, wep.Spec.Node, wep.Spec.ContainerID, wep.Spec.Handle, req.Node, req.ContainerID, handle)
	}
	return nil
}

func (s *Server) serveDel(w http.ResponseWriter, r *http.Request) {
	req, m, lg, err := s.prepare(r)
	if err != nil {
		s.fail(w, lg, "DEL", err)
		return
	}
	var del *ipamcore.EndpointDel
	var extra ipam.Extra
	if req.EndpointName != "" {
		del = s.weps.deleter(req.EndpointName, req.ContainerID)
		extra = del
	}
	released, err := m.ReleaseWith(r.Context(), req.Network, req.ContainerID, extra)
	if err != nil {
		s.fail(w, lg, "DEL", err)
		return
	}
	reply := cniapi.DelReply{Released: released, EndpointOurs: true}
	if del != nil {
		reply.EndpointOurs = del.Ours()
		if del.Ours() {
			s.weps.forget(del.Key())
		}
	}
	writeJSON(w, http.StatusOK, reply)
}

// fail answers with the CNI code and message the plugin reports, or asks
// it to fall back.
func (s *Server) fail(w http.ResponseWriter, lg *logrus.Entry, verb string, err error) {
	if lg == nil {
		lg = log
	}
	if errors.Is(err, errFallback) || errors.Is(err, ipamcore.ErrLockMismatch) {
		lg.WithError(err).Warnf("%s: the plugin does this one itself", verb)
		writeJSON(w, http.StatusServiceUnavailable, cniapi.ErrorReply{Msg: err.Error(), Fallback: true})
		return
	}
	code := ipamcore.CodeOf(err)
	if errors.Is(err, errHeld) {
		code = types.ErrTryAgainLater
	}
	lg.WithError(err).Errorf("%s failed (CNI code %d)", verb, code)
	writeJSON(w, http.StatusInternalServerError, cniapi.ErrorReply{Code: code, Msg: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
