package confd

import (
	"fmt"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestReachableByPeerRoutes: as Calico's BIRD configuration for the
// reachable_by inputs, every node with a session from a BGPPeer with
// reachableBy routes the peer's address through the gateway; nodes the
// BGPPeer does not apply to get no route. A multicast peerIP (Calico's
// test data uses ffee::10) is accepted but has no session and no route.
func TestReachableByPeerRoutes(t *testing.T) {
	in := Input{
		Nodes:   []*api.Node{node("a", "10.192.0.2/16", 0, "", "rr=true"), node("b", "10.192.0.3/16", 0, "")},
		Configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		Peers: []*api.BGPPeer{
			peer("rs-a", func(s *api.BGPPeerSpec) { s.PeerIP, s.ASNumber, s.ReachableBy = "10.225.0.4", 65515, "10.224.0.1" }),
			peer("rs-b", func(s *api.BGPPeerSpec) {
				s.PeerIP, s.ASNumber, s.ReachableBy, s.NodeSelector = "10.225.0.5:1179", 65515, "10.224.0.1", "rr == 'true'"
			}),
			peer("tor", func(s *api.BGPPeerSpec) { s.PeerIP, s.ASNumber = "10.192.0.1", 65000 }),
			peer("mcast", func(s *api.BGPPeerSpec) { s.PeerIP, s.ASNumber, s.ReachableBy = "ffee::10", 65515, "ffee::1:1" }),
		},
	}
	for node, want := range map[string]string{
		"a": "map[10.225.0.4:10.224.0.1 10.225.0.5:10.224.0.1]",
		"b": "map[10.225.0.4:10.224.0.1]",
	} {
		in.NodeName = node
		d := Compute(in)
		if got := fmt.Sprint(d.PeerRoutes); got != want {
			t.Errorf("node %s: peer routes %s, want %s", node, got, want)
		}
		for _, p := range d.Peers {
			if p.Address.IsMulticast() {
				t.Errorf("node %s: a session with multicast %s", node, p.Address)
			}
		}
		if !strings.Contains(fmt.Sprint(d.Warnings), `BGPPeer "mcast": peerIP ffee::10 is a multicast address`) {
			t.Errorf("node %s: no warning for the multicast peer: %q", node, d.Warnings)
		}
	}
}
