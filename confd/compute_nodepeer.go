package confd

import (
	"net/netip"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
)

// markRR labels a session between routed nodes me and n: a route
// reflector session when either has a cluster ID, and n a client of me
// when me is a reflector and n is not one of the same cluster.
func markRR(c candidate, me, n *api.Node) candidate {
	myCID, peerCID := clusterID(me), clusterID(n)
	if myCID != "" || peerCID != "" {
		c.Type = bgp.PeerTypeRouteReflector
	}
	if myCID != "" && myCID != peerCID {
		c.RRClient, c.RRClusterID = true, myCID
	}
	return c
}

// nodeAt is the node whose IPv4 or IPv6 BGP address is a, or nil.
func nodeAt(nodes map[string]*api.Node, a netip.Addr) *api.Node {
	for _, n := range sortedNodes(nodes) {
		if v4, ok := nodeAddr(n); ok && v4 == a {
			return n
		}
		if v6, ok := nodeAddr6(n); ok && v6 == a {
			return n
		}
	}
	return nil
}

// byIPPeers are the nodes me peers with for a BGPPeer whose peerIP is
// target's address: every other node the BGPPeer applies to when me is
// the target (and reverse, Calico's automatic reverse peering), else
// the target when the BGPPeer applies to me.
func byIPPeers(nodes map[string]*api.Node, me, target *api.Node, appliesTo func(*api.Node) bool, reverse bool) []*api.Node {
	if target.Metadata.Name != me.Metadata.Name {
		if appliesTo(me) {
			return []*api.Node{target}
		}
		return nil
	}
	if !reverse {
		return nil
	}
	var out []*api.Node
	for _, n := range sortedNodes(nodes) {
		if n.Metadata.Name != me.Metadata.Name && appliesTo(n) {
			out = append(out, n)
		}
	}
	return out
}
