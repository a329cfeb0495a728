package confd

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func wep(name, node, iface string, labels map[string]string, nets ...string) *api.WorkloadEndpoint {
	return &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: name, Labels: labels},
		Spec: api.WorkloadEndpointSpec{Node: node, Namespace: "ns", Pod: name, InterfaceName: iface, IPNetworks: nets}}
}

func wlPeer(name, sel string, asn, localASN api.ASNumber, f func(*api.BGPPeerSpec)) *api.BGPPeer {
	return peer(name, func(s *api.BGPPeerSpec) {
		s.LocalWorkloadSelector, s.ASNumber, s.LocalASNumber = sel, asn, localASN
		if f != nil {
			f(s)
		}
	})
}

// TestWorkloadPeers: which local pods a localWorkloadSelector turns into
// sessions, with which settings, and which interfaces get the peering
// addresses.
func TestWorkloadPeers(t *testing.T) {
	def := cfg("default", func(s *api.BGPConfigurationSpec) {
		meshOff(s)
		s.LocalWorkloadPeeringIPV4, s.LocalWorkloadPeeringIPV6 = "169.254.0.179", "fd00:179::1"
	})
	rtr := map[string]string{"app": "router"}
	in := Input{NodeName: "a",
		Nodes:   []*api.Node{node("a", "10.0.0.1/24", 0, "", "rack=1"), node("b", "10.0.0.2/24", 0, "", "rack=2")},
		Configs: []*api.BGPConfiguration{def},
		Filters: map[string]*api.BGPFilter{"in": {Metadata: api.ObjectMeta{Name: "in"}, Spec: api.BGPFilterSpec{
			ImportV4: []api.BGPFilterRule{{Action: api.FilterAccept, MatchOperator: api.MatchIn, CIDR: "203.0.113.0/24"}}}}},
		Profiles: map[string]*api.Profile{"kns.ns": {Metadata: api.ObjectMeta{Name: "kns.ns"},
			Spec: api.ProfileSpec{LabelsToApply: map[string]string{"pcns.bgp": "yes", "app": "from-profile"}}}},
		Workloads: []*api.WorkloadEndpoint{
			wep("r1", "a", "cali1", rtr, "10.65.1.7/32", "fd00:65::7/128"),
			wep("r2", "a", "cali2", rtr, "10.65.1.8/32"),
			wep("web", "a", "cali3", map[string]string{"app": "web"}, "10.65.1.9/32"),
			wep("other-node", "b", "cali4", rtr, "10.65.2.7/32"),
			// Matched through its namespace profile's labels only.
			{Metadata: api.ObjectMeta{Name: "nsrouter"}, Spec: api.WorkloadEndpointSpec{Node: "a", Namespace: "ns", Pod: "nsrouter",
				InterfaceName: "cali5", IPNetworks: []string{"10.65.1.10/32"}, Profiles: []string{"kns.ns"}}},
		},
		Peers: []*api.BGPPeer{
			wlPeer("b-routers", "app == 'router'", 65001, 64999, func(s *api.BGPPeerSpec) { s.Filters = []string{"in"} }),
			// Also matches r1 and r2, but b-routers comes first by name.
			wlPeer("c-all-routers", "app in {'router', 'web'}", 65002, 0, nil),
			wlPeer("d-ns", "pcns.bgp == 'yes' && app == 'from-profile'", 65003, 0, nil),
			// Applies to node b only.
			wlPeer("a-rack2", "all()", 65009, 0, func(s *api.BGPPeerSpec) { s.NodeSelector = "rack == '2'" }),
		},
	}
	d := Compute(in)
	got := brief(d.Peers)
	want := []string{
		"10.65.1.7 AS65001 local workload/ns/r1 nosrc local-as=64999",
		"10.65.1.8 AS65001 local workload/ns/r2 nosrc local-as=64999",
		"10.65.1.9 AS65002 local workload/ns/web nosrc",
		"10.65.1.10 AS65003 local workload/ns/nsrouter nosrc",
		"fd00:65::7 AS65001 local workload/ns/r1 nosrc local-as=64999",
	}
	if !slices.Equal(got, want) {
		t.Errorf("sessions\n got  %q\n want %q", got, want)
	}
	for _, p := range d.Peers {
		if !p.Passive || !p.Multihop || !p.NoAdvertise {
			t.Errorf("%s: passive %v multihop %v no-advertise %v, want all", p.Address, p.Passive, p.Multihop, p.NoAdvertise)
		}
	}
	if f := d.Filters[netip.MustParseAddr("10.65.1.7")]; len(f.Import) != 1 {
		t.Errorf("r1's filters %+v, want b-routers' import rule", f)
	}
	if gotA, wantA := fmt.Sprint(d.WorkloadPeering), "map[cali1:[169.254.0.179 fd00:179::1] cali2:[169.254.0.179] cali3:[169.254.0.179] cali5:[169.254.0.179]]"; gotA != wantA {
		t.Errorf("peering addresses\n got  %s\n want %s", gotA, wantA)
	}

	// Relabelled out of every selector: no session, no address.
	in.Workloads[2] = wep("web", "a", "cali3", map[string]string{}, "10.65.1.9/32")
	d = Compute(in)
	if slices.ContainsFunc(d.Peers, func(p PeerSpec) bool { return p.Name == "ns/web" }) || d.WorkloadPeering["cali3"] != nil {
		t.Errorf("web unlabelled: still peering %q %v", brief(d.Peers), d.WorkloadPeering)
	}

	// On node b only a-rack2 applies; node a's pods are not b's.
	in.NodeName = "b"
	d = Compute(in)
	if got, want := brief(d.Peers), []string{"10.65.2.7 AS65009 local workload/ns/other-node nosrc"}; !slices.Equal(got, want) {
		t.Errorf("node b sessions %q, want %q", got, want)
	}

	// Without the peering addresses the sessions stay (as in Calico),
	// with a warning that the pods have nothing to dial.
	in.NodeName = "a"
	in.Configs = []*api.BGPConfiguration{cfg("default", meshOff)}
	d = Compute(in)
	if len(d.Peers) != 4 || len(d.WorkloadPeering) != 0 || len(d.Warnings) != 4 {
		t.Errorf("no peering IPs: %d sessions (want 4), addresses %v (want none), warnings %q (want 4)", len(d.Peers), d.WorkloadPeering, d.Warnings)
	}
}

// TestWorkloadOnlyLocalChangesRecompute: another node's pods do not make
// confd recompute; this node's do.
func TestWorkloadOnlyLocalChangesRecompute(t *testing.T) {
	c := newCache("a")
	if c.set(wep("x", "b", "cali1", nil, "10.65.2.1/32")) {
		t.Error("another node's endpoint counted as a change")
	}
	if !c.set(wep("y", "a", "cali2", nil, "10.65.1.1/32")) || !c.del(api.KindWorkloadEndpoint, "y") {
		t.Error("this node's endpoint not counted as a change")
	}
	if c.del(api.KindWorkloadEndpoint, "x") {
		t.Error("deleting another node's endpoint counted as a change")
	}
}
