package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	pkgapi "github.com/routed-net/routed/pkg/api"
)

// This file converts between routed's types and GoBGP's API messages.

var (
	familyIPv4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	familyIPv6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// sessionFamily is the one address family a session with peer carries:
// IPv4 unicast over IPv4, IPv6 unicast over IPv6.
func sessionFamily(peer netip.Addr) *api.Family {
	if peer.Is6() {
		return familyIPv6
	}
	return familyIPv4
}

// routeFamily is GoBGP's family for a route to prefix.
func routeFamily(prefix netip.Prefix) bgp.Family {
	if prefix.Addr().Is6() {
		return bgp.RF_IPv6_UC
	}
	return bgp.RF_IPv4_UC
}

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
			AllowOwnAsn: p.AllowOwnAS,
			LocalAsn:    p.LocalASN,
		},
		Transport: &api.Transport{RemotePort: port, PassiveMode: p.Passive},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(s.cfg.ConnectRetry.Seconds()),
			HoldTime:          uint64(p.HoldTime.Seconds()),
			KeepaliveInterval: uint64(p.KeepaliveTime.Seconds()),
		}},
		AfiSafis: []*api.AfiSafi{{
			Config: &api.AfiSafiConfig{Family: sessionFamily(p.Address), Enabled: true},
		}},
	}
	if p.LocalAddress.IsValid() {
		ap.Transport.LocalAddress = p.LocalAddress.String()
	}
	if p.TTLHops > 0 {
		ap.TtlSecurity = &api.TtlSecurity{Enabled: true, TtlMin: uint32(256 - int(p.TTLHops))}
	} else if p.Multihop {
		ap.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: 255}
	}
	if p.RRClient {
		ap.RouteReflector = &api.RouteReflector{RouteReflectorClient: true, RouteReflectorClusterId: p.RRClusterID}
	}
	if !s.cfg.DisableGracefulRestart {
		ap.GracefulRestart = &api.GracefulRestart{
			Enabled:             true,
			RestartTime:         uint32(cmp.Or(p.RestartTime, s.cfg.RestartTime).Seconds()),
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

// apiPath builds a locally originated unicast path (IPv4 or IPv6, by
// prefix) with next hop self. GoBGP turns an IPv6 next hop into
// MP_REACH_NLRI. Its LOCAL_PREF carries the default route priority, as a
// Calico node's does (GoBGP's default, 100, would be priority
// 2147483547 to a Calico node); GoBGP drops it towards eBGP peers after
// export policy, which can still match it.
func apiPath(prefix netip.Prefix, nextHop netip.Addr, communities ...string) (*apiutil.Path, error) {
	nlri, err := bgp.NewIPAddrPrefix(prefix)
	if err != nil {
		return nil, fmt.Errorf("bgp: prefix %s: %w", prefix, err)
	}
	nh, err := bgp.NewPathAttributeNextHop(nextHop)
	if err != nil {
		return nil, fmt.Errorf("bgp: next hop %s: %w", nextHop, err)
	}
	return &apiutil.Path{
		Family: routeFamily(prefix),
		Nlri:   nlri,
		Attrs: append([]bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(bgp.BGP_ORIGIN_ATTR_TYPE_IGP), nh,
			bgp.NewPathAttributeLocalPref(pkgapi.LocalPrefForPriority(pkgapi.DefaultRoutePriority))},
			communityAttrs(communities)...),
	}, nil
}

// pathInfo is what routed needs from a GoBGP path.
type pathInfo struct {
	prefix  netip.Prefix
	nextHop netip.Addr
	// neighbor is the peer the path came from; invalid for local paths.
	neighbor netip.Addr
	asPath   []uint32
	withdraw bool
	// priority is the route priority its LOCAL_PREF carries
	// (api.PriorityFromLocalPref); the default without one.
	priority uint32
}

// parsePath extracts prefix, next hop and source of an IPv4 or IPv6
// unicast path.
func parsePath(p *apiutil.Path) (pathInfo, error) {
	var pi pathInfo
	if p.Family != bgp.RF_IPv4_UC && p.Family != bgp.RF_IPv6_UC {
		return pi, fmt.Errorf("bgp: not IPv4 or IPv6 unicast")
	}
	nlri, ok := p.Nlri.(*bgp.IPAddrPrefix)
	if !ok {
		return pi, fmt.Errorf("bgp: path NLRI %T is not an IP prefix", p.Nlri)
	}
	pi.prefix = nlri.Prefix.Masked()
	pi.withdraw = p.Withdrawal
	pi.priority = pkgapi.DefaultRoutePriority
	// Local paths have no source address.
	if a := p.PeerAddress; a.IsValid() && !a.IsUnspecified() {
		pi.neighbor = a
	}
	for _, a := range p.Attrs {
		switch v := a.(type) {
		case *bgp.PathAttributeNextHop:
			pi.nextHop = v.Value
		case *bgp.PathAttributeMpReachNLRI:
			// The global next hop; a link-local one may follow it.
			if v.Nexthop.IsValid() {
				pi.nextHop = v.Nexthop
			}
		case *bgp.PathAttributeLocalPref:
			pi.priority = pkgapi.PriorityFromLocalPref(v.Value)
		case *bgp.PathAttributeAsPath:
			for _, seg := range v.Value {
				pi.asPath = append(pi.asPath, seg.GetAS()...)
			}
		}
	}
	return pi, nil
}
