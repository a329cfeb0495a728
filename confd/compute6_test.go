package confd

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
)

// node6 is node with an IPv6 address too ("" for none; addr4 "" for an
// IPv6-only node).
func node6(name, addr4, addr6 string, cid string, labels ...string) *api.Node {
	n := node(name, addr4, 0, cid, labels...)
	n.Spec.BGP.IPv6Address = addr6
	return n
}

// sessions renders peers with their source and passive side:
// "fd00::2 mesh/b from fd00::1".
func sessions(ps []PeerSpec) []string {
	var out []string
	for _, p := range ps {
		s := brief([]PeerSpec{p})[0] + " from " + p.LocalAddress.String()
		if p.Passive {
			s += " passive"
		}
		out = append(out, s)
	}
	return out
}

func TestComputeDualStackPeers(t *testing.T) {
	dual := []*api.Node{
		node6("a", "10.0.0.1/24", "fd00::1/64", ""),
		node6("b", "10.0.0.2/24", "fd00::2/64", ""),
		node6("c", "10.0.0.3/24", "", ""),
		node6("d", "", "fd00::4/64", ""),
	}
	rrNodes := []*api.Node{
		node6("a", "10.0.0.1/24", "fd00::1/64", ""),
		node6("rr1", "10.0.0.11/24", "fd00::11/64", "224.0.0.1", "route-reflector=true"),
	}
	toRRs := peer("to-rrs", func(s *api.BGPPeerSpec) { s.PeerSelector = "route-reflector == 'true'" })
	tor6 := peer("tor6", func(s *api.BGPPeerSpec) {
		s.PeerIP = "[fd00::99]:1179"
		s.ASNumber = 65000
		s.Password = &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "tor"}}
	})
	tests := []struct {
		name    string
		local   string
		nodes   []*api.Node
		configs []*api.BGPConfiguration
		peers   []*api.BGPPeer
		want    []string
		warn    string
	}{{
		name: "mesh per family between nodes that have it", local: "a", nodes: dual,
		want: []string{
			"10.0.0.2 AS64512 mesh/b from 10.0.0.1 passive",
			"10.0.0.3 AS64512 mesh/c from 10.0.0.1 passive",
			"fd00::2 AS64512 mesh/b from fd00::1 passive",
			"fd00::4 AS64512 mesh/d from fd00::1 passive",
		},
	}, {
		name: "the lower address waits, as in Calico's BIRD template", local: "b", nodes: dual,
		want: []string{
			"10.0.0.1 AS64512 mesh/a from 10.0.0.2",
			"10.0.0.3 AS64512 mesh/c from 10.0.0.2 passive",
			"fd00::1 AS64512 mesh/a from fd00::2",
			"fd00::4 AS64512 mesh/d from fd00::2 passive",
		},
	}, {
		name: "IPv6-only node meshes over IPv6 only", local: "d", nodes: dual,
		want: []string{"fd00::1 AS64512 mesh/a from fd00::4", "fd00::2 AS64512 mesh/b from fd00::4"},
	}, {
		name: "route reflector clients over both families", local: "rr1", nodes: rrNodes,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)}, peers: []*api.BGPPeer{toRRs},
		want: []string{"10.0.0.1 AS64512 rr/a rrc=224.0.0.1 from 10.0.0.11", "fd00::1 AS64512 rr/a rrc=224.0.0.1 from fd00::11"},
	}, {
		name: "client side of the reflector", local: "a", nodes: rrNodes,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)}, peers: []*api.BGPPeer{toRRs},
		want: []string{"10.0.0.11 AS64512 rr/rr1 from 10.0.0.1 passive", "fd00::11 AS64512 rr/rr1 from fd00::1 passive"},
	}, {
		name: "explicit IPv6 peer with port and password", local: "a", nodes: dual,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)}, peers: []*api.BGPPeer{tor6},
		want: []string{"fd00::99 AS65000 global/tor6 port=1179 md5 from fd00::1"},
	}, {
		name: "explicit IPv6 peer on a node without IPv6", local: "c", nodes: dual,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)}, peers: []*api.BGPPeer{tor6},
		warn: `BGPPeer "tor6": peerIP fd00::99 needs an IPv6 address on node "c" (spec.bgp.ipv6Address): no session`,
	}, {
		name: "explicit IPv4 peer on an IPv6-only node", local: "d", nodes: dual,
		configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		peers:   []*api.BGPPeer{peer("tor4", func(s *api.BGPPeerSpec) { s.PeerIP = "192.0.2.1"; s.ASNumber = 65000 })},
		warn:    `BGPPeer "tor4": peerIP 192.0.2.1 needs an IPv4 address on node "d" (spec.bgp.ipv4Address): no session`,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := Compute(Input{NodeName: tc.local, Nodes: tc.nodes, Configs: tc.configs, Peers: tc.peers})
			if d.Problem != "" {
				t.Fatal(d.Problem)
			}
			if got := sessions(d.Peers); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("peers:\n got  %q\n want %q\nwarnings %q", got, tc.want, d.Warnings)
			}
			if tc.warn != "" && !slices.Contains(d.Warnings, tc.warn) {
				t.Errorf("warnings %q, want %q", d.Warnings, tc.warn)
			}
		})
	}
}

func TestComputeDualStackGlobal(t *testing.T) {
	d := Compute(Input{NodeName: "a", Nodes: []*api.Node{node6("a", "10.0.0.5/24", "fd00::5/64", "")}})
	want := bgp.Global{ASN: 64512, RouterID: netip.MustParseAddr("10.0.0.5"), IPv6: netip.MustParseAddr("fd00::5"), ListenPort: 179}
	if d.Problem != "" || d.Global != want {
		t.Fatalf("dual-stack global %+v (problem %q), want %+v", d.Global, d.Problem, want)
	}

	// An IPv6-only node: a router ID derived from its name, stable and
	// distinct per node.
	ids := map[netip.Addr]string{}
	for _, name := range []string{"a", "b", "node-1", "node-2"} {
		d := Compute(Input{NodeName: name, Nodes: []*api.Node{node6(name, "", "fd00::5/64", "")}})
		g := d.Global
		if d.Problem != "" || !g.RouterID.Is4() || g.RouterID.IsUnspecified() || !g.RouterIDDerived || g.IPv6 != netip.MustParseAddr("fd00::5") || !g.Valid() {
			t.Fatalf("IPv6-only node %s: global %+v (problem %q)", name, g, d.Problem)
		}
		if again := Compute(Input{NodeName: name, Nodes: []*api.Node{node6(name, "", "fd00::5/64", "")}}).Global.RouterID; again != g.RouterID {
			t.Fatalf("router ID of %s not stable: %s then %s", name, g.RouterID, again)
		}
		if other, dup := ids[g.RouterID]; dup {
			t.Fatalf("nodes %s and %s got the same router ID %s", other, name, g.RouterID)
		}
		ids[g.RouterID] = name
	}
}

func TestComputeFiltersPerFamily(t *testing.T) {
	f := &api.BGPFilter{Metadata: api.ObjectMeta{Name: "f"}, Spec: api.BGPFilterSpec{
		ImportV4: []api.BGPFilterRule{{Action: api.FilterReject, MatchOperator: "In", CIDR: "192.168.0.0/16"}},
		ImportV6: []api.BGPFilterRule{{Action: api.FilterReject, MatchOperator: "In", CIDR: "fd99::/16"}},
	}}
	d := Compute(Input{NodeName: "a", Nodes: []*api.Node{node6("a", "10.0.0.1/24", "fd00::1/64", "")},
		Configs: []*api.BGPConfiguration{cfg("default", meshOff)},
		Peers: []*api.BGPPeer{
			peer("tor4", func(s *api.BGPPeerSpec) { s.PeerIP = "192.0.2.1"; s.ASNumber = 65000; s.Filters = []string{"f"} }),
			peer("tor6", func(s *api.BGPPeerSpec) { s.PeerIP = "fd00::99"; s.ASNumber = 65000; s.Filters = []string{"f"} }),
		},
		Filters: map[string]*api.BGPFilter{"f": f}})
	v4, v6 := d.Filters[netip.MustParseAddr("192.0.2.1")], d.Filters[netip.MustParseAddr("fd00::99")]
	if len(v4.Import) != 1 || v4.Import[0].CIDR != netip.MustParsePrefix("192.168.0.0/16") ||
		len(v6.Import) != 1 || v6.Import[0].CIDR != netip.MustParsePrefix("fd99::/16") {
		t.Fatalf("filters per session: %+v", d.Filters)
	}
}
