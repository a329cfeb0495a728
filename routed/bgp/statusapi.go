package bgp

import (
	"context"
	"fmt"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"os"
	"slices"
	"strings"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/routed-net/routed/routed/status"
)

// The Speaker is the status server's Provider.
var _ status.Provider = (*Speaker)(nil)

var fsmNames = map[api.PeerState_SessionState]string{
	api.PeerState_SESSION_STATE_UNSPECIFIED: "Idle",
	api.PeerState_SESSION_STATE_IDLE:        "Idle",
	api.PeerState_SESSION_STATE_CONNECT:     "Connect",
	api.PeerState_SESSION_STATE_ACTIVE:      "Active",
	api.PeerState_SESSION_STATE_OPENSENT:    "OpenSent",
	api.PeerState_SESSION_STATE_OPENCONFIRM: "OpenConfirm",
	api.PeerState_SESSION_STATE_ESTABLISHED: "Established",
}

// Peers implements status.Provider: every configured session, sorted by
// address.
func (s *Speaker) Peers(ctx context.Context) ([]status.Peer, error) {
	v := s.getView()
	live := map[string]*api.Peer{}
	if v.started {
		err := s.srv().ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
			live[p.GetConf().GetNeighborAddress()] = p
		})
		if err != nil {
			return nil, fmt.Errorf("bgp: list peers: %w", err)
		}
	}
	out := make([]status.Peer, 0, len(v.peers))
	for addr, cfg := range v.peers {
		out = append(out, s.peerStatus(addr, cfg, live[addr], v))
	}
	// Wanted sessions not configured yet count as down, so that "node
	// status" does not report success while BGP is still starting.
	w := s.want.snapshot()
	for _, p := range w.peers {
		addr := p.Address.String()
		if _, ok := v.peers[addr]; ok || !p.Address.IsValid() || (v.global != nil && v.global.isSelf(p.Address)) {
			continue
		}
		why := "Idle: waiting for this node's blocks from IPAM"
		if !v.started {
			why = "Idle: BGP not started (no AS number or router ID yet)"
		}
		out = append(out, status.Peer{Address: addr, Type: p.Type, Name: p.Name, State: status.StateStart,
			BGPState: "Idle", Since: s.start, Info: why, PeerASN: p.ASN})
	}
	slices.SortFunc(out, func(a, b status.Peer) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

func (s *Speaker) peerStatus(addr string, cfg Peer, lp *api.Peer, v view) status.Peer {
	lastErr, since, hasPassword := s.diag.get(addr)
	p := status.Peer{
		Address: addr, Type: cfg.Type, Name: cfg.Name,
		State: status.StateStart, BGPState: "Idle", Since: since,
		PeerASN: cfg.ASN,
	}
	if v.global != nil {
		p.LocalASN = v.global.ASN
	}
	if lp != nil {
		st := lp.GetState()
		p.BGPState = fsmNames[st.GetSessionState()]
		p.RouterID = st.GetRouterId()
		if m := st.GetMessages(); m != nil {
			p.MessagesSent, p.MessagesReceived = m.GetSent().GetTotal(), m.GetReceived().GetTotal()
			p.UpdatesSent, p.UpdatesReceived = m.GetSent().GetUpdate(), m.GetReceived().GetUpdate()
		}
		for _, af := range lp.GetAfiSafis() {
			if afi := af.GetState().GetFamily().GetAfi(); afi == api.Family_AFI_IP || afi == api.Family_AFI_IP6 {
				p.Received += af.GetState().GetReceived()
				p.Accepted += af.GetState().GetAccepted()
				p.Advertised += af.GetState().GetAdvertised()
			}
		}
	}
	switch {
	case cfg.ConfigError != "":
		p.State, p.Info = status.StateDown, "Idle: "+cfg.ConfigError
	case p.BGPState == "Established":
		p.State, p.Info = status.StateUp, "Established"
	case lp != nil && lp.GetState().GetAdminState() != api.PeerState_ADMIN_STATE_UP:
		p.State, p.Info = status.StateDown, "Idle: administratively down"
	case lastErr != "":
		p.Info = p.BGPState + ": " + lastErr
	case p.BGPState == "Active" || p.BGPState == "Connect":
		// GoBGP reports no event for a connection attempt that fails.
		p.Info = p.BGPState + ": no BGP connection yet (peer down, unreachable, or not configured for this node)"
		if hasPassword {
			p.Info += "; TCP MD5 password mismatch?"
		}
	default:
		p.Info = p.BGPState
	}
	return p
}

// Routes implements status.Provider: every IPv4 then every IPv6 path in
// the RIB.
func (s *Speaker) Routes(ctx context.Context) ([]status.Route, error) {
	if !s.getView().started {
		return nil, nil
	}
	var out []status.Route
	for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
		routes, err := s.routes(f)
		if err != nil {
			return nil, err
		}
		slices.SortStableFunc(routes, func(a, b status.Route) int { return strings.Compare(a.Prefix, b.Prefix) })
		out = append(out, routes...)
	}
	return out, nil
}

// routes lists the paths of one family in the RIB.
func (s *Speaker) routes(family bgp.Family) ([]status.Route, error) {
	var out []status.Route
	err := s.srv().ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: family},
		func(_ bgp.NLRI, paths []*apiutil.Path) {
			for _, p := range paths {
				pi, err := parsePath(p)
				if err != nil {
					continue
				}
				r := status.Route{
					Prefix: pi.prefix.String(), NextHop: pi.nextHop.String(),
					Local: !pi.neighbor.IsValid(), Best: p.Best,
				}
				if !r.Local {
					r.Peer = pi.neighbor.String()
				}
				if p.Age != 0 {
					r.Since = time.Unix(p.Age, 0)
				}
				if len(pi.asPath) > 0 {
					r.ASPath = strings.Trim(fmt.Sprint(pi.asPath), "[]")
				}
				if r.Best && !r.Local && s.cfg.RouteStatus != nil {
					prog := s.cfg.RouteStatus.Programmed(pi.prefix)
					r.Programmed = &prog
					r.Filtered = s.cfg.RouteStatus.Filtered(pi.prefix)
				}
				out = append(out, r)
			}
		})
	if err != nil {
		return nil, fmt.Errorf("bgp: list %s paths: %w", family, err)
	}
	return out, nil
}

// Process implements status.Provider.
func (s *Speaker) Process(ctx context.Context) (status.Process, error) {
	v := s.getView()
	pending, problem := s.want.pending()
	p := status.Process{
		PID: os.Getpid(), Started: s.start, NodeName: s.cfg.NodeName,
		ListenPort: v.listenPort, GracefulRestart: !s.cfg.DisableGracefulRestart,
		Restarting: v.restarting, PeersPending: pending, ConfigProblem: problem,
	}
	if v.global != nil {
		p.RouterID, p.ASN = v.global.RouterID.String(), v.global.ASN
	}
	return p, nil
}
