package bgp

import (
	"fmt"
	"net/netip"
	"strings"

	api "github.com/osrg/gobgp/v3/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// This file converts between routed's types and GoBGP's API messages.

var familyIPv4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}

// apiPeer builds GoBGP's peer configuration for p.
//
// Graceful restart (RFC 4724) is negotiated on every session with the
// notification extension (RFC 8538): a session reset by a configuration
// change then keeps routes as stale until they are re-sent, while
// removing a peer still sends a Hard Reset and drops them at once.
func (s *Speaker) apiPeer(p Peer, restarting bool) *api.Peer {
	port := uint32(p.Port)
	if port == 0 {
		port = DefaultPort
	}
	ap := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(),
			PeerAsn:         p.ASN,
			AuthPassword:    string(p.Password),
			// GoBGP resets a session when its Config changes but ignores
			// route-reflector settings on update; carrying them in the
			// description makes UpdatePeer apply them.
			Description: sessionFingerprint(p),
			AdminDown:   p.ConfigError != "",
		},
		Transport: &api.Transport{RemotePort: port, PassiveMode: p.Passive},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(s.cfg.ConnectRetry.Seconds()),
			HoldTime:          uint64(p.HoldTime.Seconds()),
			KeepaliveInterval: uint64(p.KeepaliveTime.Seconds()),
		}},
		AfiSafis: []*api.AfiSafi{{
			Config: &api.AfiSafiConfig{Family: familyIPv4, Enabled: true},
		}},
	}
	if p.LocalAddress.IsValid() {
		ap.Transport.LocalAddress = p.LocalAddress.String()
	}
	if p.RRClient {
		ap.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: p.RRClusterID}
	}
	if !s.cfg.DisableGracefulRestart {
		ap.GracefulRestart = &api.GracefulRestart{
			Enabled:             true,
			RestartTime:         uint32(s.cfg.RestartTime.Seconds()),
			DeferralTime:        uint32(s.deferralTime().Seconds()),
			NotificationEnabled: true,
			LocalRestarting:     restarting,
		}
		ap.AfiSafis[0].MpGracefulRestart = &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: true}}
	}
	return ap
}

// sessionFingerprint describes the settings GoBGP would not notice
// changing on UpdatePeer. (KeepOriginalNextHop is export policy: it needs
// a soft reset, not a new session.)
func sessionFingerprint(p Peer) string {
	var b strings.Builder
	b.WriteString("routed")
	if p.RRClient {
		b.WriteString(" rr-client=" + p.RRClusterID)
	}
	return b.String()
}

// apiPath builds a locally originated IPv4 unicast path with next hop
// self, or its withdrawal.
func apiPath(prefix netip.Prefix, nextHop netip.Addr) (*api.Path, error) {
	nlri, err := anypb.New(&api.IPAddressPrefix{Prefix: prefix.Addr().String(), PrefixLen: uint32(prefix.Bits())})
	if err != nil {
		return nil, err
	}
	origin, err := anypb.New(&api.OriginAttribute{Origin: 0}) // IGP
	if err != nil {
		return nil, err
	}
	nh, err := anypb.New(&api.NextHopAttribute{NextHop: nextHop.String()})
	if err != nil {
		return nil, err
	}
	return &api.Path{Family: familyIPv4, Nlri: nlri, Pattrs: []*anypb.Any{origin, nh}}, nil
}

// pathInfo is what routed needs from a GoBGP path.
type pathInfo struct {
	prefix  netip.Prefix
	nextHop netip.Addr
	// neighbor is the peer the path came from; invalid for local paths.
	neighbor netip.Addr
	asPath   []uint32
	withdraw bool
}

// parsePath extracts prefix, next hop and source of an IPv4 unicast path.
func parsePath(p *api.Path) (pathInfo, error) {
	var pi pathInfo
	if p.GetFamily().GetAfi() != api.Family_AFI_IP || p.GetFamily().GetSafi() != api.Family_SAFI_UNICAST {
		return pi, fmt.Errorf("bgp: not IPv4 unicast")
	}
	var nlri api.IPAddressPrefix
	if err := p.GetNlri().UnmarshalTo(&nlri); err != nil {
		return pi, fmt.Errorf("bgp: path NLRI: %w", err)
	}
	addr, err := netip.ParseAddr(nlri.Prefix)
	if err != nil {
		return pi, fmt.Errorf("bgp: path prefix %q: %w", nlri.Prefix, err)
	}
	pi.prefix = netip.PrefixFrom(addr, int(nlri.PrefixLen)).Masked()
	pi.withdraw = p.IsWithdraw
	// Local paths have no source address ("<nil>" in the API).
	if a, err := netip.ParseAddr(p.NeighborIp); err == nil && !a.IsUnspecified() {
		pi.neighbor = a
	}
	for _, a := range p.Pattrs {
		m, err := a.UnmarshalNew()
		if err != nil {
			continue
		}
		switch v := m.(type) {
		case *api.NextHopAttribute:
			pi.nextHop, _ = netip.ParseAddr(v.NextHop)
		case *api.MpReachNLRIAttribute:
			if len(v.NextHops) > 0 {
				pi.nextHop, _ = netip.ParseAddr(v.NextHops[0])
			}
		case *api.AsPathAttribute:
			for _, seg := range v.Segments {
				pi.asPath = append(pi.asPath, seg.Numbers...)
			}
		}
	}
	return pi, nil
}

// clonePeer copies an API peer so that GoBGP never shares our message.
func clonePeer(p *api.Peer) *api.Peer { return proto.Clone(p).(*api.Peer) }
