package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// TestBirdNextHopSelfOnReflector: a routed route reflector passes its
// client b's block on to BIRD 2 (an iBGP peer) with b's own next hop by
// default (nextHopMode Auto), with its own address under nextHopMode
// Self, and with b's again under Keep, each change without resetting
// the session.
func TestBirdNextHopSelfOnReflector(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.meshOff()
	tor := c.lab.AddHost("tor", 100)
	rrLabel := map[string]string{"route-reflector": "true"}
	rr := c.addNodeSpec("rr", 11, rrLabel, func(n *api.Node) { n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1" },
		func(*childConfig) {})
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "to-rr"},
		Spec: api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"}})
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol bgp node_a {
	local %[1]s as 64512;
	neighbor %[2]s as 64512;
	direct;
	ipv4 { import all; export none; gateway direct; };
}
`, tor.Addr, rr.host.Addr))
	peer := &api.BGPPeer{Metadata: api.ObjectMeta{Name: "bird"}, Spec: api.BGPPeerSpec{Node: "rr", PeerIP: tor.Addr.String(), ASNumber: 64512}}
	c.apply(peer)

	nextHop := func(want string) {
		t.Helper()
		out := bird.WaitCtl(t, "show route 10.65.2.0/26 all", 30*time.Second, func(s string) bool {
			return strings.Contains(s, "BGP.next_hop: "+want+"\n") || strings.Contains(s, "BGP.next_hop: "+want+" ")
		})
		t.Logf("BIRD's route to b's block:\n%s", out)
	}
	nextHop(b.host.Addr.String())
	mark := birdSessionUp(t, bird)

	peer.Spec.NextHopMode = "Self"
	c.apply(peer)
	nextHop(rr.host.Addr.String())

	peer.Spec.NextHopMode = "Keep"
	c.apply(peer)
	nextHop(b.host.Addr.String())
	if change := birdSessionLeftUp(t, bird, mark); change != "" {
		t.Errorf("the session was reset (BIRD logged %q): next hop mode is export policy", change)
	}
}
