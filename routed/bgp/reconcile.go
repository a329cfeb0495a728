package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/config/oc"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// apply converges GoBGP on w. It returns a delay after which it wants to
// run again (while waiting for the first affinity snapshot).
func (s *Speaker) apply(ctx context.Context, w snapshot) (time.Duration, error) {
	if w.global == nil || !w.global.Valid() {
		if s.running == nil && w.global != nil {
			s.log.WithField("global", *w.global).Warn("no usable AS number or IPv4 router ID yet; BGP not started")
		}
		return 0, nil
	}
	if err := s.applyGlobal(ctx, *w.global); err != nil {
		return 0, err
	}
	// The no-export policy before the paths: GoBGP judges a path by the
	// export policies in force when it enters the RIB and sends it at
	// once, so a block of a pool with disableBGPExport that arrives in
	// the same pass as its pool would reach the peers until the policy's
	// soft reset withdrew it. While the policy fails, the paths it is
	// to reject and the one in force does not are held back (those
	// already sent stay: sent before the pool became private).
	noExportErr := s.ownStep(ctx, func() error { return s.applyNoExport(ctx, w.noExport) })
	// The sessions' policies and BGPFilters before the paths too, for
	// the same reason: an export Reject that arrives in the same pass
	// as a new block it rejects judges that block's path as it enters
	// the RIB (before, the established peer got it until the filter's
	// soft reset withdrew it). A failure here holds the sessions back
	// (below), not the paths.
	var held []Peer
	var ownErr, filterErr error
	peers := w.peers
	if w.peersSet {
		held, ownErr = s.applySessionPolicies(ctx, w.peers)
		peers, filterErr = s.applySessionFilters(ctx, w.peers, w.filters)
	}
	routes := w.routes
	if noExportErr != nil {
		routes = s.exportable(w.routes, w.noExport)
	}
	if err := s.applyPaths(ctx, routes); err != nil {
		return 0, errors.Join(noExportErr, ownErr, filterErr, err)
	}
	if noExportErr != nil {
		return 0, errors.Join(noExportErr, ownErr, filterErr)
	}
	if !w.peersSet {
		return 0, nil
	}
	if !w.blocksSynced {
		if wait := s.cfg.InitialSyncTimeout - time.Since(s.runStart); wait > 0 {
			// Peers would learn an incomplete route set. A policy that
			// failed meanwhile is tried again then: returned, the
			// error's backoff (not the wait) would start the sessions.
			if err := errors.Join(ownErr, filterErr); err != nil {
				s.log.WithError(err).Warn("installing BGP policies failed; trying again when the initial sync wait ends")
			}
			return wait, nil
		}
	}
	if ownErr != nil {
		return 0, errors.Join(ownErr, filterErr)
	}
	if err := s.applyPeers(ctx, peers); err != nil {
		return 0, errors.Join(filterErr, err)
	}
	if h := s.peersHook.Load(); h != nil {
		(*h)()
	}
	if len(held) > 0 || len(s.rejudge) > 0 {
		if err := s.applyOwnPolicies(ctx, w.peers); err != nil {
			return 0, errors.Join(filterErr, err)
		}
		if err := s.rejudgeSessions(ctx, nil); err != nil {
			return 0, errors.Join(filterErr, err)
		}
	}
	return 0, errors.Join(filterErr, s.dropFilters(ctx, w.filters))
}

// applySessionPolicies installs routed's own policies other than the
// no-export one (that one is apply's first step) for the wanted peers
// and those held, and judges again the sessions an earlier pass updated;
// it returns the held sessions' applied settings. A session being
// removed keeps its policies until it is gone (as it keeps its
// filters): taken off their neighbor sets first, an eBGP session got
// every route learned meanwhile (no own-routes-only Reject), for as
// long as its removal failed. A session being updated (UpdatePeer:
// GoBGP replaces it or changes it in place) keeps its applied
// settings' policies too until it is (both apply meanwhile): an eBGP
// peer made iBGP lost its own-routes-only Reject while its eBGP
// session was still up. A change of policy settings alone moves the
// policies first: the session's soft reset then re-sends under the new
// ones (keep-next-hop and own routes only order themselves,
// applyOwnPolicies).
func (s *Speaker) applySessionPolicies(ctx context.Context, want []Peer) ([]Peer, error) {
	var held []Peer
	for _, a := range sortedAddrs(s.applied) {
		old := s.applied[a]
		i := slices.IndexFunc(want, func(p Peer) bool { return p.Address == a })
		if i < 0 || (!reflect.DeepEqual(want[i], old) && !onlyPolicy(old, want[i])) {
			held = append(held, old)
			if i >= 0 && !sameSession(old, want[i]) { // UpdatePeer ahead
				if s.rejudge == nil {
					s.rejudge = map[netip.Addr]bool{}
				}
				s.rejudge[a] = true
			}
		}
	}
	if err := s.applyOwnPolicies(ctx, append(slices.Clone(want), held...)); err != nil {
		return held, err
	}
	// Sessions updated in an earlier pass that failed after them lost
	// their old settings' policies just now: judge them again at once,
	// whatever happens to the other sessions.
	return held, s.rejudgeSessions(ctx, held)
}

// applySessionFilters installs the sessions' BGPFilters, after routed's
// own policies and before the sessions: confd sets a peer's filters
// before the peer, so a new session's first routes are already judged
// by them. Added the other way round, a route an import Reject refuses
// reached the RouteSink until the filter's soft reset
// (TestBirdBGPFilterIPv6 under -race saw it). Filters that fail to
// install hold back only their own session, and only one not up yet
// (up, it keeps its last filters): it returns the peers whose sessions
// may be applied.
func (s *Speaker) applySessionFilters(ctx context.Context, want []Peer, filters map[netip.Addr]PeerFilters) ([]Peer, error) {
	subnets, err := interfaceSubnets(filters)
	if s.failIfaces.Load() {
		subnets, err = nil, errors.New("injected failure reading the interfaces")
	}
	ifaceErr := err != nil
	if !ifaceErr {
		err = s.applyFilters(ctx, filters, subnets)
	}
	if err == nil {
		return want, nil
	}
	return slices.DeleteFunc(slices.Clone(want), func(p Peer) bool {
		if s.unfiltered(p.Address, filters, subnets, ifaceErr) {
			s.log.WithField("peer", p.Address.String()).Warn("BGP session not started: its BGPFilter rules could not be installed")
			return true
		}
		return false
	}), err
}

// rejudgeSessions soft-resets, both ways, each recorded session but
// those in skip (their old settings' policies are still in): one that
// came up under both sets (GoBGP dials at once) kept what only the old
// ones rejected (an eBGP peer made iBGP: its empty-AS_PATH routes
// refused, learned routes withheld). A session not up yet starts under
// the new ones alone; one GoBGP no longer has (removed meanwhile) is
// forgotten, not reset.
func (s *Speaker) rejudgeSessions(ctx context.Context, skip []Peer) error {
	for _, a := range slices.SortedFunc(maps.Keys(s.rejudge), netip.Addr.Compare) {
		if slices.ContainsFunc(skip, func(p Peer) bool { return p.Address == a }) {
			continue
		}
		if _, ok := s.applied[a]; !ok {
			delete(s.rejudge, a)
			continue
		}
		for _, dir := range []api.ResetPeerRequest_Direction{api.ResetPeerRequest_DIRECTION_IN, api.ResetPeerRequest_DIRECTION_OUT} {
			if err := s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: dir}); err != nil {
				return fmt.Errorf("bgp: judge the routes of updated peer %s again: %w", a, err)
			}
		}
		delete(s.rejudge, a)
	}
	return nil
}

// softReset soft-resets the session with a in dir after a policy
// change, so that the routes it sent or was sent are judged by the
// policies now in force. One that fails is judged again later, both
// ways, until that succeeds (rejudgeSessions, every pass): ignored, a
// route a new Reject covers stayed with the peer for as long as the
// session lasted.
func (s *Speaker) softReset(ctx context.Context, a netip.Addr, dir api.ResetPeerRequest_Direction) {
	var err error
	if f := s.failReset.Load(); f != nil {
		err = (*f)(a)
	}
	if err == nil {
		err = s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: a.String(), Soft: true, Direction: dir})
	}
	if err == nil {
		return
	}
	s.log.WithError(err).WithField("peer", a.String()).Warn("BGP soft reset after a policy change failed; retrying")
	if s.rejudge == nil {
		s.rejudge = map[netip.Addr]bool{}
	}
	s.rejudge[a] = true
}

// applyOwnPolicies installs routed's own policies other than the
// no-export one for peers. Each is independent of the others: one that
// fails does not keep the next ones out of the pass (the sessions wait
// for all of them); keep-next-hop and own routes only follow what the
// other has installed: an eBGP peer leaves own routes only once its
// keep-next-hop policy is in, and leaves keep-next-hop (the second
// keep-next-hop step) once it is in own routes only.
func (s *Speaker) applyOwnPolicies(ctx context.Context, peers []Peer) error {
	var errs error
	for _, step := range []func() error{
		func() error { return s.applyKeepNextHop(ctx, peers, false) },
		func() error { return s.applyNextHopSelf(ctx, peers) },
		func() error { return s.applyOwnRoutesOnly(ctx, peers) },
		func() error { return s.applyKeepNextHop(ctx, peers, true) },
		func() error { return s.applyEmptyPathReject(ctx, peers) },
		func() error { return s.applyNoAdvertise(ctx, peers) },
	} {
		errs = errors.Join(errs, s.ownStep(ctx, step))
	}
	return errs
}

// ownStep runs a step installing one of routed's own policies, then
// moves the BGPFilter policies behind any it added (GoBGP appends): a
// filter's Accept never judges a route before routed's Reject, not even
// while a later step fails.
func (s *Speaker) ownStep(ctx context.Context, step func() error) error {
	err := step()
	if s.ownPolicyAdded {
		s.ownPolicyAdded = false
		err = errors.Join(err, s.reorderFilters(ctx))
	}
	return err
}

// exportable is routes without those inside the no-export CIDRs want
// that the installed no-export policy does not reject, unless already
// originated: what may be added while the no-export policy fails to
// install.
func (s *Speaker) exportable(routes map[netip.Prefix]string, want []netip.Prefix) map[netip.Prefix]string {
	within := func(p netip.Prefix, cidrs []netip.Prefix) bool {
		return slices.ContainsFunc(cidrs, func(c netip.Prefix) bool { return c.Bits() <= p.Bits() && c.Contains(p.Addr()) })
	}
	out := make(map[netip.Prefix]string, len(routes))
	for p, comms := range routes {
		if _, sent := s.paths[p]; sent || !within(p, want) || within(p, s.noExport) {
			out[p] = comms
		} else {
			s.log.WithField("prefix", p).Warn("route of a pool with BGP export disabled held back: its no-export policy is not installed")
		}
	}
	return out
}

// ribFamilies are the address families of GoBGP's RIBs: IPv4 and IPv6
// unicast, all routed exchanges. Left empty, GoBGP makes a global and a
// route-server RIB for each of the 27 families it knows, each of 2048
// locked shards: about 11 MiB of heap per routed for tables never used.
var ribFamilies = []uint32{
	uint32(oc.AfiSafiTypeToIntMap[oc.AFI_SAFI_TYPE_IPV4_UNICAST]),
	uint32(oc.AfiSafiTypeToIntMap[oc.AFI_SAFI_TYPE_IPV6_UNICAST]),
}

func (s *Speaker) listenPort(g Global) int32 {
	switch {
	case s.cfg.ListenPort != 0:
		return s.cfg.ListenPort
	case g.ListenPort != 0:
		return int32(g.ListenPort)
	}
	return DefaultPort
}

// applyGlobal starts BGP, or restarts it when the identity changed.
func (s *Speaker) applyGlobal(ctx context.Context, g Global) error {
	s.logs.setSeverity(g.LogSeverity)
	if s.running != nil {
		r := *s.running
		if r.ASN == g.ASN && r.RouterID == g.RouterID && s.listenPort(r) == s.listenPort(g) && slices.Equal(s.listenAddrs(r), s.listenAddrs(g)) {
			s.running = &g
			s.setView(func(v *view) { v.global = &g })
			return nil
		}
		s.log.WithField("old", r).WithField("new", g).Warn("BGP identity changed: restarting BGP, all sessions reset")
		if err := s.srv().StopBgp(ctx, &api.StopBgpRequest{}); err != nil {
			return fmt.Errorf("bgp: stop for restart: %w", err)
		}
		s.newServer()
		s.watching = false // the watches went with the old server
		s.running = nil
		s.applied, s.rejudge = map[netip.Addr]Peer{}, nil
		s.paths, s.pathAttrs = map[netip.Prefix]uuid.UUID{}, map[netip.Prefix]string{}
		s.keepNH, s.selfNH, s.ownOnly, s.emptyPath, s.noExport, s.noExportName = nil, nil, nil, nil, nil, ""
		s.noAdvMark, s.noAdvertiseOn = nil, false
		s.filters = nil
		s.setView(func(v *view) { v.started = false; v.peers = map[string]Peer{} })
	}
	addrs := s.listenAddrs(g)
	port := s.listenPort(g)
	err := s.srv().StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:             g.ASN,
		RouterId:        g.RouterID.String(),
		ListenPort:      port,
		ListenAddresses: addrs,
		Families:        ribFamilies,
	}})
	if err != nil {
		return fmt.Errorf("bgp: start (AS %d, router ID %s, port %d): %w", g.ASN, g.RouterID, port, err)
	}
	s.running = &g
	s.markAlive()
	s.setView(func(v *view) { v.global = &g; v.listenPort = port; v.started = true })
	s.log.WithFields(map[string]any{"asn": g.ASN, "routerID": g.RouterID, "port": port}).Info("BGP started")
	if !s.watching {
		// The watches live as long as the process: they survive a BGP
		// restart, during which the withdrawals of every learned route
		// arrive through them like any other change. Peer state changes
		// (with the reason a session went down) feed the diagnostics.
		cb := server.WatchEventMessageCallbacks{OnPeerUpdate: s.diag.onPeer}
		opts := []server.WatchOption{server.WatchPeer()}
		if s.cfg.RouteSink != nil {
			if s.feeder == nil {
				s.feeder = newFeeder(s.cfg.RouteSink, s.log)
			}
			cb.OnBestPath = s.feeder.onBest
			opts = append(opts, server.WatchBestPath(true))
		}
		if err := s.srv().WatchEvent(context.Background(), cb, opts...); err != nil {
			return fmt.Errorf("bgp: watch best paths and peers: %w", err)
		}
		s.watching = true
	}
	return nil
}

// listenAddrs are the addresses BGP listens on for g: Config's, else
// the node's own addresses with BindRouterID, else every IPv4 address
// and, when this host has IPv6, every IPv6 address.
func (s *Speaker) listenAddrs(g Global) []string {
	switch {
	case len(s.cfg.ListenAddresses) > 0:
		return s.cfg.ListenAddresses
	case g.BindRouterID:
		var out []string
		if !g.RouterIDDerived {
			out = append(out, g.RouterID.String())
		}
		if g.IPv6.IsValid() {
			out = append(out, g.IPv6.String())
		}
		return out
	case hostHasIPv6():
		return []string{"0.0.0.0", "::"}
	}
	return []string{"0.0.0.0"}
}

// applyPaths originates exactly the wanted prefixes, next hop self (the
// node's address of the prefix's family). A prefix of a family this node
// has no address of is not originated.
func (s *Speaker) applyPaths(ctx context.Context, want map[netip.Prefix]string) error {
	// attrs is what each originated path carries: next hop and
	// communities; a path whose attributes change is replaced.
	attrs := make(map[netip.Prefix]string, len(want))
	for p, comms := range want {
		if nh := s.running.nextHop(p); nh.IsValid() {
			attrs[p] = nh.String() + " " + comms
		} else if _, had := s.paths[p]; !had {
			s.log.WithField("prefix", p).Debug("no address of this family on the node: route not advertised")
		}
	}
	for p, id := range s.paths {
		if a, ok := attrs[p]; ok && a == s.pathAttrs[p] {
			continue
		}
		err := s.srv().DeletePath(apiutil.DeletePathRequest{UUIDs: []uuid.UUID{id}})
		if err != nil {
			return fmt.Errorf("bgp: withdraw %s: %w", p, err)
		}
		delete(s.paths, p)
		delete(s.pathAttrs, p)
		if _, again := attrs[p]; !again {
			s.log.WithField("prefix", p).Info("withdrew route")
		}
	}
	for _, p := range sortedPrefixes(attrs) {
		if _, ok := s.paths[p]; ok {
			continue
		}
		path, err := apiPath(p, s.running.nextHop(p), strings.Fields(want[p])...)
		if err != nil {
			return err
		}
		resp, err := s.srv().AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}})
		if err == nil && len(resp) == 1 {
			err = resp[0].Error
		}
		if err != nil {
			return fmt.Errorf("bgp: advertise %s: %w", p, err)
		}
		s.paths[p], s.pathAttrs[p] = resp[0].UUID, attrs[p]
		if h := s.pathHook.Load(); h != nil {
			(*h)(p)
		}
		s.log.WithField("prefix", p).Info("advertising route")
	}
	return nil
}

// applyPeers adds, updates and removes sessions so that exactly want
// exists; unchanged sessions are not touched.
func (s *Speaker) applyPeers(ctx context.Context, want []Peer) error {
	wanted := make(map[netip.Addr]Peer, len(want))
	for _, p := range want {
		if p.Address.IsValid() && !s.running.isSelf(p.Address) {
			wanted[p.Address] = p
		}
	}
	for addr, old := range s.applied {
		if _, ok := wanted[addr]; ok {
			continue
		}
		if h := s.removeHook.Load(); h != nil {
			(*h)(addr)
		}
		if err := s.srv().DeletePeer(ctx, &api.DeletePeerRequest{Address: addr.String()}); err != nil {
			return fmt.Errorf("bgp: remove peer %s: %w", addr, err)
		}
		delete(s.applied, addr)
		s.diag.forget(addr.String())
		s.setView(func(v *view) { delete(v.peers, addr.String()) })
		s.log.WithField("peer", old).Info("removed BGP peer")
	}
	restarting := time.Now().Before(s.restartUntil)
	for _, addr := range sortedAddrs(wanted) {
		p := wanted[addr]
		old, exists := s.applied[addr]
		switch {
		case !exists:
			s.diag.configure(addr.String(), p.Password != "")
			err := s.srv().AddPeer(ctx, &api.AddPeerRequest{Peer: s.apiPeer(p, restarting)})
			if err != nil {
				s.diag.forget(addr.String())
				return fmt.Errorf("bgp: add peer %s: %w", addr, err)
			}
			s.log.WithField("peer", p).Info("added BGP peer")
		case onlyPolicy(old, p):
			if old.NoAdvertise != p.NoAdvertise {
				// The import policy already changed: judge the routes
				// the peer sent again, so they gain or lose the mark.
				err := s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: addr.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_IN})
				if err != nil {
					return fmt.Errorf("bgp: re-import from peer %s: %w", addr, err)
				}
			}
			if old.KeepOriginalNextHop == p.KeepOriginalNextHop && old.NextHopSelf == p.NextHopSelf {
				break
			}
			// The export policy already changed; re-send our routes. The
			// soft reset also withdraws what was sent and the policy now
			// rejects (GoBGP keeps what it sent each peer): an eBGP peer
			// that loses keepOriginalNextHop, now down to our own routes,
			// loses the learned ones without its session being dropped
			// (TestKeepNextHopLiftedAfterOwnRoutesOnly).
			err := s.srv().ResetPeer(ctx, &api.ResetPeerRequest{Address: addr.String(), Soft: true, Direction: api.ResetPeerRequest_DIRECTION_OUT})
			if err != nil {
				return fmt.Errorf("bgp: re-advertise to peer %s: %w", addr, err)
			}
		case !sameSession(old, p):
			s.diag.setPassword(addr.String(), p.Password != "")
			_, err := s.srv().UpdatePeer(ctx, &api.UpdatePeerRequest{Peer: s.apiPeer(p, false)})
			if err != nil {
				return fmt.Errorf("bgp: update peer %s: %w", addr, err)
			}
			s.log.WithField("peer", p).Info("updated BGP peer")
		}
		s.applied[addr] = p
		s.setView(func(v *view) { v.peers[addr.String()] = p })
	}
	return nil
}

// onlyPolicy reports whether old and p differ, but only in
// KeepOriginalNextHop and NextHopSelf (export policy) or NoAdvertise
// (import policy): fields that need no new session.
func onlyPolicy(old, p Peer) bool {
	if old.KeepOriginalNextHop == p.KeepOriginalNextHop && old.NextHopSelf == p.NextHopSelf && old.NoAdvertise == p.NoAdvertise {
		return false
	}
	old.KeepOriginalNextHop, old.NextHopSelf, old.NoAdvertise = p.KeepOriginalNextHop, p.NextHopSelf, p.NoAdvertise
	return sameSession(old, p)
}

// keepNHPolicy names the export policy (and its neighbor set) that keeps
// next hops for some peers.
const keepNHPolicy = "routed-keep-nexthop"

// applyKeepNextHop installs a global export policy leaving the next hop
// unchanged towards peers with KeepOriginalNextHop. An eBGP peer that
// no longer has it keeps the policy until the own-routes-only one is
// installed for it: lifted first, the peer got every route learned
// meanwhile with next hop self for as long as own routes only failed.
// With liftOnly it only takes peers out (after the own-routes-only
// step): adding is the first call's, which failed if anything is left
// to add.
func (s *Speaker) applyKeepNextHop(ctx context.Context, peers []Peer, liftOnly bool) error {
	if s.running == nil {
		return nil
	}
	want := peerPrefixes(peers, func(p Peer) bool {
		if p.KeepOriginalNextHop {
			return true
		}
		a := hostPrefix(p.Address)
		return p.external(s.running.ASN) && slices.Contains(s.keepNH, a) && !slices.Contains(s.ownOnly, a)
	})
	if liftOnly && len(setDiff(want, s.keepNH)) > 0 {
		return nil
	}
	stmts := []*api.Statement{{
		Name:    keepNHPolicy,
		Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED, Nexthop: &api.NexthopAction{Unchanged: true}},
	}}
	return s.applyNeighborPolicy(ctx, keepNHPolicy, want, exportDir, stmts, &s.keepNH)
}

// selfNHPolicy names the export policy (and its neighbor set) that sets
// next hop self towards some peers.
const selfNHPolicy = "routed-next-hop-self"

// applyNextHopSelf installs a global export policy setting this node as
// the next hop towards peers with NextHopSelf: GoBGP would otherwise
// pass reflected iBGP routes on with their original next hop.
func (s *Speaker) applyNextHopSelf(ctx context.Context, peers []Peer) error {
	want := peerPrefixes(peers, func(p Peer) bool { return p.NextHopSelf })
	stmts := []*api.Statement{{
		Name:    selfNHPolicy,
		Actions: &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_UNSPECIFIED, Nexthop: &api.NexthopAction{Self: true}},
	}}
	return s.applyNeighborPolicy(ctx, selfNHPolicy, want, exportDir, stmts, &s.selfNH)
}

const (
	importDir = api.PolicyDirection_POLICY_DIRECTION_IMPORT
	exportDir = api.PolicyDirection_POLICY_DIRECTION_EXPORT
)

// applyNeighborPolicy keeps a global policy (dir: import or export) named name whose
// statements apply to the peers in want (address/32 or /128, sorted): the policy
// and its neighbor set exist only while want is not empty, and *cur
// remembers what was installed. GoBGP only has global policies for
// ordinary peers, so each statement is limited by the neighbor set.
func (s *Speaker) applyNeighborPolicy(ctx context.Context, name string, want []string, dir api.PolicyDirection, stmts []*api.Statement, cur *[]string) error {
	if slices.Equal(want, *cur) {
		return nil
	}
	if len(want) == 0 {
		// Still assigned (GoBGP refused), it is kept and removed
		// again next time: forgotten, it went on applying to the
		// peers it named, and adding it again failed for good.
		err := s.srv().DeletePolicyAssignment(ctx, &api.DeletePolicyAssignmentRequest{
			Assignment: &api.PolicyAssignment{Name: "global", Direction: dir,
				Policies: []*api.Policy{{Name: name}}}})
		if err != nil {
			return fmt.Errorf("bgp: remove policy %s: %w", name, err)
		}
		s.deleteOwnPolicy(ctx, name, api.DefinedType_DEFINED_TYPE_NEIGHBOR)
		*cur = nil
		return nil
	}
	if *cur != nil {
		// Change the set in place: GoBGP's statements hold the set they
		// were made with, so replacing it would not reach them. Add
		// before removing, as an empty neighbor set matches every peer.
		added, removed := setDiff(want, *cur), setDiff(*cur, want)
		if len(added) > 0 {
			set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: added}
			if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set}); err != nil {
				return fmt.Errorf("bgp: %s neighbor set: %w", name, err)
			}
		}
		if len(removed) > 0 {
			set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: removed}
			if err := s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{DefinedSet: set}); err != nil {
				return fmt.Errorf("bgp: %s neighbor set: %w", name, err)
			}
		}
	} else {
		set := &api.DefinedSet{DefinedType: api.DefinedType_DEFINED_TYPE_NEIGHBOR, Name: name, List: want}
		for _, st := range stmts {
			if st.Conditions == nil {
				st.Conditions = &api.Conditions{}
			}
			st.Conditions.NeighborSet = &api.MatchSet{Name: name, Type: api.MatchSet_TYPE_ANY}
		}
		if err := s.addOwnPolicy(ctx, dir, set, &api.Policy{Name: name, Statements: stmts}); err != nil {
			return err
		}
	}
	*cur = want
	return nil
}

// addOwnPolicy adds one of routed's own policies, unassigned, with its
// defined set, and puts it in the global list of dir before the
// filters. A step that fails is undone (the policy and set deleted),
// so the next pass adds them afresh: left in GoBGP unassigned, adding
// the policy again failed on its statements ("already defined") at
// every pass until a restart. What a failed undo leaves is deleted
// first (nothing names an unassigned policy: the caller knows it is).
func (s *Speaker) addOwnPolicy(ctx context.Context, dir api.PolicyDirection, set *api.DefinedSet, pol *api.Policy) error {
	s.deleteOwnPolicy(ctx, pol.Name, set.DefinedType)
	if err := s.srv().AddDefinedSet(ctx, &api.AddDefinedSetRequest{DefinedSet: set, Replace: true}); err != nil {
		return fmt.Errorf("bgp: %s defined set: %w", set.Name, err)
	}
	if err := s.srv().AddPolicy(ctx, &api.AddPolicyRequest{Policy: pol}); err != nil {
		s.deleteOwnPolicy(ctx, pol.Name, set.DefinedType)
		return fmt.Errorf("bgp: %s policy: %w", pol.Name, err)
	}
	if err := s.assignOwnPolicy(ctx, dir, pol.Name); err != nil {
		s.deleteOwnPolicy(ctx, pol.Name, set.DefinedType)
		return err
	}
	s.ownPolicyAdded = true // the filters are checked to be behind it
	return nil
}

// deleteOwnPolicy deletes one of routed's own policies, with its
// statements, and its defined set of the same name (of type setType),
// each if GoBGP has it: the policy must be in no list.
func (s *Speaker) deleteOwnPolicy(ctx context.Context, name string, setType api.DefinedType) {
	_ = s.srv().DeletePolicy(ctx, &api.DeletePolicyRequest{Policy: &api.Policy{Name: name}, All: true})
	_ = s.srv().DeleteDefinedSet(ctx, &api.DeleteDefinedSetRequest{
		DefinedSet: &api.DefinedSet{DefinedType: setType, Name: name}, All: true})
}

// setDiff returns the elements of a that are not in b.
func setDiff(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

func sortedPrefixes[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return out
}

func sortedAddrs(m map[netip.Addr]Peer) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for a := range m {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}
