package bgp

import (
	"context"
	"errors"
	"github.com/google/uuid"
	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/internal/heartbeat"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/server"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/ipam"
)

// ErrAlreadyRunning is returned by a second call to Run.
var ErrAlreadyRunning = errors.New("bgp: speaker already running")

// Speaker is routed's BGP speaker: an embedded GoBGP server that
// advertises this node's blocks and hands learned routes to felix.
//
// Inputs arrive through SetGlobal, SetPeers, SetServiceCIDRs (from
// confd), the AffinityHandler methods and SetBorrowedIPs (from the node
// feed: feed.go);
// they only record the wanted state. Run's loop alone programs GoBGP,
// touching only what differs.
type Speaker struct {
	cfg Config
	log *logrus.Entry
	// bgp is the GoBGP server; a new one replaces it when the BGP
	// identity changes (a v4 server cannot start again once stopped).
	bgp   atomic.Pointer[server.BgpServer]
	logs  *logAdapter
	diag  *diag
	want  *desired
	start time.Time
	ran   atomic.Bool

	// Owned by the loop in Run.
	running  *Global
	watching bool
	// feeder outlives servers: what the sink was told stays known across
	// a restart of BGP.
	feeder  *feeder
	applied map[netip.Addr]Peer
	// rejudge lists sessions updated under their old settings' own
	// policies too: once those are gone, their routes are judged again
	// (a soft reset each way), or a session that came up meanwhile kept
	// what they rejected.
	rejudge   map[netip.Addr]bool
	paths     map[netip.Prefix]uuid.UUID // prefix -> GoBGP path UUID
	pathAttrs map[netip.Prefix]string    // prefix -> next hop and communities it was sent with
	// BGPFilter policies installed, by session (filter.go);
	// ownPolicyAdded says routed's own policies were added after them
	// (they must come first).
	filters        map[netip.Addr]*installedFilters
	filterGen      uint64 // last generation of filter and no-export names (filterinstall.go, noexport.go)
	ownPolicyAdded bool
	// failFilter, set by tests, fails installing a session's filters;
	// assignedHook, set by tests, is called on the loop after each
	// change of a global policy list.
	failFilter   atomic.Pointer[func(peer netip.Addr) error]
	assignedHook atomic.Pointer[func()]
	// failSwap, set by tests, fails replacing a filter in a list.
	failSwap atomic.Pointer[func(dir api.PolicyDirection) error]
	// failAssign, set by tests, fails putting one of routed's own
	// policies (by name) in its global list.
	failAssign atomic.Pointer[func(name string) error]
	// removeHook, set by tests, is called on the loop before a session
	// is removed.
	removeHook atomic.Pointer[func(peer netip.Addr)]
	// peersHook, set by tests, is called on the loop after the
	// sessions were applied, before the old settings' policies go.
	peersHook atomic.Pointer[func()]
	// failIfaces, set by tests, fails reading the interfaces.
	failIfaces atomic.Bool
	// failReset, set by tests, fails a policy change's soft reset of a
	// session (softReset).
	failReset atomic.Pointer[func(peer netip.Addr) error]
	// pathHook, set by tests, is called on the loop after a path was
	// added to GoBGP's RIB (and sent to the peers its policies let it
	// reach).
	pathHook      atomic.Pointer[func(p netip.Prefix)]
	keepNH        []string
	selfNH        []string       // peers with next hop self
	noExport      []netip.Prefix // CIDRs kept from every peer
	noExportName  string         // its policy in GoBGP (noexport.go), "" for none
	ownOnly       []string       // eBGP peers limited to our own routes
	emptyPath     []string       // eBGP peers whose empty AS paths are dropped
	noAdvMark     []string       // peers whose routes are marked NO_ADVERTISE
	noAdvertiseOn bool           // the NO_ADVERTISE export policy is installed
	restartUntil  time.Time
	runStart      time.Time
	markerFailed  bool // the restart marker could not be written (said once)

	// view is what status readers may see of the loop's state.
	mu   sync.Mutex
	view view
}

// view is the loop's state as published to status readers.
type view struct {
	global     *Global
	listenPort int32
	peers      map[string]Peer
	restarting bool
	started    bool
}

// New creates a speaker; nothing talks BGP until Run and SetGlobal.
func New(cfg Config) (*Speaker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	d := newDiag()
	logs := newLogAdapter(cfg.Log)
	s := &Speaker{
		cfg:       cfg,
		log:       cfg.Log,
		logs:      logs,
		diag:      d,
		want:      newDesired(),
		start:     time.Now(),
		applied:   map[netip.Addr]Peer{},
		paths:     map[netip.Prefix]uuid.UUID{},
		pathAttrs: map[netip.Prefix]string{},
		view:      view{peers: map[string]Peer{}},
	}
	s.newServer()
	return s, nil
}

// newServer starts a GoBGP server and makes it current. Its Serve
// goroutine ends when the server is stopped.
func (s *Speaker) newServer() {
	srv := server.NewBgpServer(server.LoggerOption(slog.New(s.logs), s.logs.level))
	go srv.Serve()
	s.bgp.Store(srv)
}

// srv is the current GoBGP server.
func (s *Speaker) srv() *server.BgpServer { return s.bgp.Load() }

// SetGlobal sets the local AS, router ID and listen port. Changing the
// AS or router ID restarts BGP (all sessions reset).
func (s *Speaker) SetGlobal(g Global) {
	s.want.update(func() { s.want.global = &g })
}

// SetPeers sets the complete list of wanted sessions. Sessions whose
// settings did not change are left alone.
func (s *Speaker) SetPeers(peers []Peer) {
	peers = slices.Clone(peers)
	s.want.update(func() { s.want.peers, s.want.peersSet = peers, true })
}

// SetConfigProblem records why BGP cannot be configured from the
// datastore ("" once it can): the node has no Node resource or no BGP
// address, say. Status reports it while no sessions were set.
func (s *Speaker) SetConfigProblem(problem string) {
	s.want.mu.Lock()
	s.want.problem = problem
	s.want.mu.Unlock()
}

// SetServiceCIDRs sets the service cluster IP ranges to advertise.
func (s *Speaker) SetServiceCIDRs(cidrs []netip.Prefix) {
	cidrs = slices.Clone(cidrs)
	s.want.update(func() { s.want.services = cidrs })
}

// SetPrefixCommunities sets the communities attached to originated
// routes by prefix (Calico's prefixAdvertisements).
func (s *Speaker) SetPrefixCommunities(adverts []PrefixCommunities) {
	adverts = slices.Clone(adverts)
	s.want.update(func() { s.want.adverts = adverts })
}

// SetBorrowedIPs sets the addresses this node uses from other nodes'
// blocks; each is advertised as a /32 (IPv4) or /128 (IPv6).
func (s *Speaker) SetBorrowedIPs(addrs []netip.Addr) {
	addrs = slices.Clone(addrs)
	s.want.update(func() { s.want.borrowed = addrs })
}

// OnAffinitySnapshot implements ipam.AffinityHandler: it replaces the
// set of blocks to advertise with this node's confirmed affinities.
func (s *Speaker) OnAffinitySnapshot(all []Affinity) {
	blocks := map[netip.Prefix]bool{}
	for _, a := range all {
		if a.Node == s.cfg.NodeName && a.State == AffinityConfirmed && a.CIDR.IsValid() {
			blocks[a.CIDR.Masked()] = true
		}
	}
	s.want.update(func() { s.want.blocks, s.want.blocksSynced = blocks, true })
}

// OnAffinityUpdate implements ipam.AffinityHandler for one change.
func (s *Speaker) OnAffinityUpdate(a Affinity, deleted bool) {
	if a.Node != s.cfg.NodeName || !a.CIDR.IsValid() {
		return
	}
	p := a.CIDR.Masked()
	s.want.update(func() {
		if deleted || a.State != AffinityConfirmed {
			delete(s.want.blocks, p)
		} else {
			s.want.blocks[p] = true
		}
	})
}

// Run programs GoBGP until ctx ends. On return BGP sessions are left up
// on purpose: no Cease is sent, so when the process exits its peers see
// a dropped connection and, with graceful restart, keep this node's
// routes until it is back. Use Stop for a node that leaves for good.
func (s *Speaker) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	s.runStart = time.Now()
	if alive, ok := s.detectRestart(); ok && !s.cfg.DisableGracefulRestart {
		s.restartUntil = alive.Add(s.cfg.RestartTime)
		s.setView(func(v *view) { v.restarting = true })
		s.log.WithField("restartTime", s.cfg.RestartTime).WithField("lastAlive", alive.UTC().Format(time.RFC3339)).
			Info("restarting: peers keep our routes while we resync")
	}

	retry := time.NewTimer(time.Hour)
	retry.Stop()
	resync := time.NewTicker(time.Minute)
	defer resync.Stop()
	failures := backoff.New(500*time.Millisecond, 30*time.Second)
	beat := time.NewTicker(heartbeat.Interval)
	defer beat.Stop()
	for {
		s.cfg.Beat.Mark()
		select {
		case <-ctx.Done():
			s.shutdownGracefully()
			return nil
		case <-s.want.kick:
		case <-retry.C:
		case <-resync.C:
		case <-beat.C:
			s.cfg.Beat.Mark()
			s.markAlive()
			continue // nothing to program: only show the loop is alive
		}
		again, err := s.apply(ctx, s.want.snapshot())
		switch {
		case err != nil && ctx.Err() == nil:
			wait := failures.Next()
			s.log.WithError(err).WithField("retryIn", wait).Warn("programming BGP failed")
			retry.Reset(wait)
		case again > 0:
			retry.Reset(again)
		default:
			failures.Reset()
		}
	}
}

// Stop ends BGP for good: every session is closed with a Cease, so peers
// drop this node's routes at once. Call it only after Run returned, and
// only when the node leaves the cluster, never for a restart.
func (s *Speaker) Stop(ctx context.Context) error {
	if err := s.srv().StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
		return err
	}
	s.setView(func(v *view) { v.started = false; v.peers = map[string]Peer{} })
	s.removeRestartMarker()
	return nil
}

func (s *Speaker) setView(f func(v *view)) {
	s.mu.Lock()
	f(&s.view)
	s.mu.Unlock()
}

func (s *Speaker) getView() view {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.view
	v.peers = make(map[string]Peer, len(s.view.peers))
	for k, p := range s.view.peers {
		v.peers[k] = p
	}
	return v
}

// deferralTime bounds how long a restarting speaker waits for its peers'
// End-of-RIB before sending its routes: well inside RestartTime, so
// peers never drop routes they kept for us.
func (s *Speaker) deferralTime() time.Duration {
	return max(min(s.cfg.RestartTime/3, 60*time.Second), time.Second)
}

// The Speaker receives block affinities straight from the IPAM watch.
var _ ipam.AffinityHandler = (*Speaker)(nil)
