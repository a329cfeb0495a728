package confd

import (
	"slices"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestPeerIPOfANode: Calico's route_reflector_v6_by_ip case. A BGPPeer
// whose peerIP is the reflector's IPv6 address, without asNumber, peers
// every node with the reflector at its AS over IPv6 only, and the
// reflector back with each of them as its clients.
func TestPeerIPOfANode(t *testing.T) {
	nodes := []*api.Node{
		node6("kube-master", "10.192.0.2/16", "fe0a::2/96", "10.0.0.1", "routeReflector=true"),
		node6("kube-node-1", "10.192.0.3/16", "fe0a::3/96", ""),
		node6("kube-node-2", "10.192.0.4/16", "fe0a::4/96", ""),
	}
	in := Input{Nodes: nodes, Configs: []*api.BGPConfiguration{cfg("default", func(s *api.BGPConfigurationSpec) {
		s.ASNumber = 64532
		meshOff(s)
	})}, Peers: []*api.BGPPeer{peer("bgppeer-other-nodes", func(s *api.BGPPeerSpec) { s.PeerIP = "fe0a::2" })}}

	in.NodeName = "kube-master"
	want := []string{"fe0a::3 AS64532 rr/kube-node-1 rrc=10.0.0.1", "fe0a::4 AS64532 rr/kube-node-2 rrc=10.0.0.1"}
	if got := brief(Compute(in).Peers); !slices.Equal(got, want) {
		t.Errorf("reflector: %q, want %q", got, want)
	}
	in.NodeName = "kube-node-1"
	if got := brief(Compute(in).Peers); !slices.Equal(got, []string{"fe0a::2 AS64532 rr/kube-master"}) {
		t.Errorf("client: %q", got)
	}

	// reversePeering Manual: the reflector does not peer back.
	in.Peers[0].Spec.ReversePeering = api.ReversePeeringManual
	in.NodeName = "kube-master"
	if got := brief(Compute(in).Peers); len(got) != 0 {
		t.Errorf("reflector with reversePeering Manual: %q", got)
	}
	in.NodeName = "kube-node-1"
	// No AS and no node's address: no session, a warning.
	in.Peers = []*api.BGPPeer{peer("p", func(s *api.BGPPeerSpec) { s.PeerIP = "fe0a::99" })}
	if d := Compute(in); len(d.Peers) != 0 || len(d.Warnings) != 1 {
		t.Errorf("unknown address without AS: %q %q", brief(d.Peers), d.Warnings)
	}
}

// TestNextHopMode: Calico's nextHopMode, over keepOriginalNextHop.
func TestNextHopMode(t *testing.T) {
	for mode, want := range map[string]string{"": "10.0.0.9 AS65000 global/p keepnh", "Auto": "10.0.0.9 AS65000 global/p",
		"Self": "10.0.0.9 AS65000 global/p nhself", "Keep": "10.0.0.9 AS65000 global/p keepnh"} {
		in := Input{NodeName: "a", Nodes: []*api.Node{node("a", "10.0.0.1/24", 0, "")},
			Peers: []*api.BGPPeer{peer("p", func(s *api.BGPPeerSpec) {
				s.PeerIP, s.ASNumber, s.KeepOriginalNextHop, s.NextHopMode = "10.0.0.9", 65000, true, mode
			})}}
		if got := brief(Compute(in).Peers); !slices.Equal(got, []string{want}) {
			t.Errorf("nextHopMode %q: %q, want %q", mode, got, want)
		}
	}
}
