package confd

import (
	"net/netip"

	"github.com/routed-net/routed/pkg/api"
)

// reachableBy is the gateway a BGPPeer's session with peer is routed
// through: spec.reachableBy when it is an address of peer's family
// (validation guarantees that; a malformed one is ignored as Calico's
// confd does).
func reachableBy(s api.BGPPeerSpec, peer netip.Addr) netip.Addr {
	gw, err := netip.ParseAddr(s.ReachableBy)
	if err != nil || gw.Is4() != peer.Is4() || gw.Zone() != "" || gw.IsMulticast() || gw == peer {
		return netip.Addr{}
	}
	return gw.Unmap()
}

// peerRoutes are the routes Calico's BIRD configuration adds for
// reachableBy ("route <peer>/32 via <gateway>" in its static protocol,
// which its kernel protocol programs): one per session whose BGPPeer
// sets it, nil when none does. Felix programs them; in BIRD a static
// route beats a BGP one for the same prefix, and so does it in felix.
func peerRoutes(peers []PeerSpec) map[netip.Addr]netip.Addr {
	var out map[netip.Addr]netip.Addr
	for _, p := range peers {
		if !p.ReachableBy.IsValid() {
			continue
		}
		if out == nil {
			out = map[netip.Addr]netip.Addr{}
		}
		out[p.Address] = p.ReachableBy
	}
	return out
}
