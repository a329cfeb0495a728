package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// TestBGPFilterMatchesAndOperations: one BGPFilter, with Calico's newer
// rule fields, on node a's sessions with BIRD 2 (eBGP, AS 65000) and
// gobgpd (iBGP). What each peer receives shows each field at work:
//   - source RemotePeers: b's block (learned over the mesh) is accepted
//     towards BIRD with a community added and two ASNs prepended; a's
//     own block does not match that rule.
//   - peerType: "Reject iBGP" on a's block is skipped on the eBGP session
//     (BIRD gets the block, with the large community of the next rule)
//     and applies on the iBGP one (gobgpd gets the service range only).
//   - import: a community match accepts one route, an AS path prefix
//     (65000 65099) rejects one but not a route from 65000 65098, and an
//     eBGP-only reject drops one.
func TestBGPFilterMatchesAndOperations(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tor := c.lab.AddHost("tor", 100)
	ibgp := c.lab.AddHost("ibgp", 101)
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	bird := torBird(t, tor, a,
		"192.168.100.0/24 blackhole { bgp_community.add((65000, 100)); }",
		"192.168.200.0/24 blackhole",
		"192.168.50.0/24 blackhole { bgp_path.prepend(65099); }",
		"192.168.60.0/24 blackhole { bgp_path.prepend(65098); }")
	g := bgptest.StartGobgpd(t, ibgp, fmt.Sprintf(`[global.config]
  as = 64512
  router-id = %[1]q
  port = 179
[[neighbors]]
  [neighbors.config]
    neighbor-address = %[2]q
    peer-as = 64512
  [neighbors.transport.config]
    passive-mode = true
`, ibgp.Addr, a.host.Addr))

	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		ServiceClusterIPs: []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}}}})
	c.apply(&api.BGPFilter{Metadata: api.ObjectMeta{Name: "edge"}, Spec: api.BGPFilterSpec{
		ExportV4: []api.BGPFilterRule{
			{Action: "Accept", Source: "RemotePeers", Operations: []api.BGPFilterOperation{
				{AddCommunity: &api.BGPFilterAddCommunity{Value: "65001:200"}},
				{PrependASPath: &api.BGPFilterPrependASPath{Prefix: []api.ASNumber{65010, 65011}}}}},
			{Action: "Reject", PeerType: "iBGP", MatchOperator: "Equal", CIDR: "10.65.1.0/26"},
			{Action: "Accept", PeerType: "eBGP", MatchOperator: "In", CIDR: "10.65.0.0/16",
				Operations: []api.BGPFilterOperation{{AddCommunity: &api.BGPFilterAddCommunity{Value: "65001:7:7"}}}},
		},
		ImportV4: []api.BGPFilterRule{
			{Action: "Accept", Communities: &api.BGPFilterCommunities{Values: []string{"65000:100"}}},
			{Action: "Reject", ASPathPrefix: []api.ASNumber{65000, 65099}},
			{Action: "Reject", PeerType: "eBGP", MatchOperator: "Equal", CIDR: "192.168.200.0/24"},
			{Action: "Reject", PeerType: "iBGP"},
		},
	}})
	for name, addr := range map[string]string{"tor": tor.Addr.String(), "ibgp": ibgp.Addr.String()} {
		asn := api.ASNumber(65000)
		if name == "ibgp" {
			asn = 64512
		}
		// keepOriginalNextHop lets a pass learned routes to its eBGP peer
		// at all (by default an eBGP peer gets a node's own routes only).
		c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: name}, Spec: api.BGPPeerSpec{
			Node: "a", PeerIP: addr, ASNumber: asn, Filters: []string{"edge"}, KeepOriginalNextHop: name == "tor"}})
	}

	a.waitRoutes("the community-matched and the other-AS-path routes", 30*time.Second,
		has("192.168.100.0/24", tor.Addr.String(), "192.168.60.0/24", tor.Addr.String(), "10.65.2.0/26", b.host.Addr.String()))
	if r := a.sink().Routes; r["192.168.50.0/24"] != "" || r["192.168.200.0/24"] != "" {
		t.Errorf("import filter let in the AS-path-prefix or the eBGP-only rejected route: %v", r)
	}

	remote := bird.WaitCtl(t, "show route 10.65.2.0/26 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "BGP.as_path: 64512 65010 65011 64512") && strings.Contains(s, "(65001,200)")
	})
	t.Logf("BIRD's route to b's block (source RemotePeers, operations):\n%s", remote)
	own := bird.WaitCtl(t, "show route 10.65.1.0/26 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "(65001, 7, 7)")
	})
	if strings.Contains(own, "65010") || strings.Contains(own, "(65001,200)") {
		t.Errorf("a's own block matched the RemotePeers rule:\n%s", own)
	}
	t.Logf("BIRD's route to a's block (iBGP-only reject skipped, eBGP rule's large community):\n%s", own)

	var rib string
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		if rib, _ = g.CLI("global", "rib"); !strings.Contains(rib, "10.96.0.0/12") {
			return fmt.Sprintf("gobgpd (iBGP) should have the service range:\n%s", rib)
		}
		return ""
	})
	if strings.Contains(rib, "10.65.1.0/26") {
		t.Fatalf("gobgpd (iBGP) should have the service range and not a's block (rejected for iBGP peers):\n%s", rib)
	}
	t.Logf("gobgpd's RIB:\n%s", rib)
}

// TestBGPFilterInterface: Calico's interface match, as BIRD reads it
// (the interface a BGP route's next hop is reached through). BIRD 2's
// routes come with next hops on node a's eth0: a rule on "lo" passes
// them by, one on "eth*" rejects the route it names. On export, "eth0"
// matches b's block (learned over the mesh, next hop b on eth0) and
// adds a community, but never a's own block, as Calico's originated
// routes have no interface.
func TestBGPFilterInterface(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	bird := torBird(t, tor, a, "192.168.100.0/24 blackhole", "192.168.200.0/24 blackhole")
	c.apply(&api.BGPFilter{Metadata: api.ObjectMeta{Name: "ifaces"}, Spec: api.BGPFilterSpec{
		ImportV4: []api.BGPFilterRule{
			{Action: "Reject", Interface: "lo"},
			{Action: "Reject", Interface: "eth*", MatchOperator: "Equal", CIDR: "192.168.200.0/24"},
		},
		ExportV4: []api.BGPFilterRule{
			{Action: "Accept", Interface: "eth0", Operations: []api.BGPFilterOperation{{AddCommunity: &api.BGPFilterAddCommunity{Value: "65001:9"}}}},
		},
	}})
	c.applyTorPeer(tor, api.BGPPeerSpec{Node: "a", Filters: []string{"ifaces"}, KeepOriginalNextHop: true})

	a.waitRoutes("BIRD's route past the lo rule, b's block", 30*time.Second,
		has("192.168.100.0/24", tor.Addr.String(), "10.65.2.0/26", b.host.Addr.String()))
	if r := a.sink().Routes; r["192.168.200.0/24"] != "" {
		t.Errorf("the eth* rule let 192.168.200.0/24 in: %v", r)
	}
	out := bird.WaitCtl(t, "show route 10.65.2.0/26 all", 30*time.Second, func(s string) bool { return strings.Contains(s, "(65001,9)") })
	t.Logf("BIRD's route to b's block:\n%s", out)
	own := bird.WaitCtl(t, "show route 10.65.1.0/26 all", 30*time.Second, func(s string) bool { return strings.Contains(s, "10.65.1.0/26") })
	if strings.Contains(own, "community") {
		t.Errorf("a's own block matched an interface rule:\n%s", own)
	}
}

// TestFRRSeesPrependedPaths: FRR 8, which drops eBGP routes whose AS
// path does not start with its neighbor's AS, takes the routes a
// BGPFilter prepends to: other ASNs as "64512 65010 64512 ..." (GoBGP
// adds the node's AS before export policy runs, so it is repeated in
// front), padding with the node's own AS exactly as Calico's BIRD does.
func TestFRRSeesPrependedPaths(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	tor := c.lab.AddHost("tor", 100)
	a := c.addNode("a", 1, nil, "10.65.1.0/26", "10.65.3.0/26")
	frr := bgptest.StartFRR(t, tor, fmt.Sprintf(`frr defaults traditional
hostname tor
router bgp 65000
 bgp router-id %[1]s
 no bgp ebgp-requires-policy
 neighbor %[2]s remote-as 64512
 address-family ipv4 unicast
  neighbor %[2]s activate
 exit-address-family
`, tor.Addr, a.host.Addr))
	c.apply(&api.BGPFilter{Metadata: api.ObjectMeta{Name: "prepend"}, Spec: api.BGPFilterSpec{
		ExportV4: []api.BGPFilterRule{
			{Action: "Accept", MatchOperator: "Equal", CIDR: "10.65.1.0/26", Operations: []api.BGPFilterOperation{
				{PrependASPath: &api.BGPFilterPrependASPath{Prefix: []api.ASNumber{65010}}},
				{AddCommunity: &api.BGPFilterAddCommunity{Value: "65001:1:1"}}}},
			{Action: "Accept", MatchOperator: "Equal", CIDR: "10.65.3.0/26", Operations: []api.BGPFilterOperation{
				{PrependASPath: &api.BGPFilterPrependASPath{Prefix: []api.ASNumber{64512, 64512}}}}},
		},
	}})
	c.applyTorPeer(tor, api.BGPPeerSpec{Filters: []string{"prepend"}})

	out := frr.WaitVtysh(t, "show bgp ipv4 unicast 10.65.1.0/26", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "64512 65010 64512") && strings.Contains(s, "65001:1:1")
	})
	t.Logf("FRR's route to 10.65.1.0/26:\n%s", out)
	out = frr.WaitVtysh(t, "show bgp ipv4 unicast 10.65.3.0/26", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "64512 64512 64512")
	})
	if strings.Contains(out, "64512 64512 64512 64512") {
		t.Errorf("padding with the node's AS is one too long:\n%s", out)
	}
	t.Logf("FRR's route to 10.65.3.0/26:\n%s", out)
}
