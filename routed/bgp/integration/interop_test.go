package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// TestBirdTopOfRack: BIRD 2 as an eBGP top-of-rack router. It learns
// the nodes' blocks; the route it sends reaches the nodes' RouteSinks.
func TestBirdTopOfRack(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol static upstream {
	ipv4;
	route 192.168.100.0/24 blackhole;
}
filter to_nodes { if net = 192.168.100.0/24 then accept; reject; }
template bgp nodes {
	local %[1]s as 65000;
	ipv4 { import all; export filter to_nodes; };
}
protocol bgp node_a from nodes { neighbor %[2]s as 64512; }
protocol bgp node_b from nodes { neighbor %[3]s as 64512; }
`, tor.Addr, a.host.Addr, b.host.Addr))
	c.applyTorPeer(tor, api.BGPPeerSpec{})

	for _, n := range []*node{a, b} {
		n.waitRoutes("route from the ToR", 30*time.Second, has("192.168.100.0/24", tor.Addr.String()))
		ps := n.waitPeers("ToR session up", 10*time.Second, func(ps []status.Peer) bool {
			p, ok := findPeer(ps, tor.Addr)
			return ok && p.Established() && p.Type == bgp.PeerTypeGlobal && p.PeerASN == 65000
		})
		_ = ps
	}
	out := bird.WaitCtl(t, "show route", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "10.65.1.0/26") && strings.Contains(s, "10.65.2.0/26")
	})
	t.Logf("BIRD's routes:\n%s", out)
	out, _ = bird.Ctl("show route 10.65.1.0/26 all")
	if !strings.Contains(out, "via "+a.host.Addr.String()) || !strings.Contains(out, "64512") {
		t.Fatalf("BIRD's route to a's block:\n%s", out)
	}
	out, _ = bird.Ctl("show protocols")
	t.Logf("BIRD protocols:\n%s", out)
}

// TestBirdRouteReflector: BIRD 2 reflects routes between routed nodes
// that do not mesh.
func TestBirdRouteReflector(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.meshOff()
	rr := c.lab.AddHost("rr", 200)
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	cc := c.addNode("c", 3, nil, "10.65.3.0/26")
	conf := fmt.Sprintf(`
router id %[1]s;
protocol device {}
template bgp clients {
	local %[1]s as 64512;
	rr client;
	rr cluster id %[1]s;
	direct;
	ipv4 { import all; export all; gateway direct; };
}
`, rr.Addr)
	for _, n := range []*node{a, b, cc} {
		conf += fmt.Sprintf("protocol bgp client_%s from clients { neighbor %s as 64512; }\n", n.name, n.host.Addr)
	}
	bird := bgptest.StartBird(t, rr, conf)
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "bird-rr"}, Spec: api.BGPPeerSpec{PeerIP: rr.Addr.String(), ASNumber: 64512}})

	ip := func(n *node) string { return n.host.Addr.String() }
	a.waitRoutes("b and c through BIRD", 30*time.Second, has("10.65.2.0/26", ip(b), "10.65.3.0/26", ip(cc)))
	b.waitRoutes("a and c through BIRD", 30*time.Second, has("10.65.1.0/26", ip(a), "10.65.3.0/26", ip(cc)))
	cc.waitRoutes("a and b through BIRD", 30*time.Second, has("10.65.1.0/26", ip(a), "10.65.2.0/26", ip(b)))
	a.waitPeers("only the RR", 10*time.Second, allEstablished(rr.Addr))
	out, _ := bird.Ctl("show protocols")
	t.Logf("BIRD protocols:\n%s", out)

	// Withdrawal is reflected too.
	a.affinity("10.65.1.0/26", "confirmed", true)
	b.waitRoutes("a's block withdrawn through BIRD", 10*time.Second, lacks("10.65.1.0/26"))
}

// TestGobgpdRouteReflector: Debian's gobgpd reflects routes between
// routed nodes, with MD5 on every session (gobgpd is built with a Go
// whose listeners do not use MPTCP, so its MD5 works).
func TestGobgpdRouteReflector(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.meshOff()
	rr := c.lab.AddHost("rr", 201)
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	conf := fmt.Sprintf("[global.config]\n  as = 64512\n  router-id = %q\n  port = 179\n", rr.Addr)
	for _, n := range []*node{a, b} {
		writeSecret(t, n, "bgp", "rr", "rr-secret")
		// The RR waits for its clients to dial: GoBGP on both sides of a
		// session that failed once can otherwise keep missing each other.
		conf += fmt.Sprintf(`
[[neighbors]]
  [neighbors.config]
    neighbor-address = %q
    peer-as = 64512
    auth-password = "rr-secret"
  [neighbors.transport.config]
    passive-mode = true
  [neighbors.route-reflector.config]
    route-reflector-client = true
    route-reflector-cluster-id = %q
`, n.host.Addr, rr.Addr)
	}
	g := bgptest.StartGobgpd(t, rr, conf)
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "gobgpd-rr"}, Spec: api.BGPPeerSpec{PeerIP: rr.Addr.String(), ASNumber: 64512,
		Password: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "rr"}}}})

	a.waitRoutes("b through gobgpd", 30*time.Second, has("10.65.2.0/26", b.host.Addr.String()))
	b.waitRoutes("a through gobgpd", 30*time.Second, has("10.65.1.0/26", a.host.Addr.String()))
	out, _ := g.CLI("neighbor")
	t.Logf("gobgpd neighbors:\n%s", out)
}

// TestBirdCalicoPeerOptions: a BGPPeer written as Calico writes it, with
// peerIP "IP:port", ttlSecurity and numAllowedLocalASNumbers, against
// BIRD 2 listening on port 1179 with GTSM on. BIRD sends a route whose
// AS path already holds the nodes' AS: only accepted because of
// numAllowedLocalASNumbers.
func TestBirdCalicoPeerOptions(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol static upstream {
	ipv4;
	route 192.168.101.0/24 blackhole;
}
filter to_nodes { if net = 192.168.101.0/24 then { bgp_path.prepend(64512); accept; } reject; }
protocol bgp node_a {
	local %[1]s port 1179 as 65000;
	neighbor %[2]s as 64512;
	ttl security yes;
	ipv4 { import all; export filter to_nodes; };
}
`, tor.Addr, a.host.Addr))
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPPeerSpec{
		PeerIP: tor.Addr.String() + ":1179", ASNumber: 65000, TTLSecurity: 1, NumAllowedLocalASNumbers: 1, MaxRestartTime: "45s"}})

	a.waitPeers("ToR session up on port 1179 with GTSM", 30*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, tor.Addr)
		return ok && p.Established()
	})
	a.waitRoutes("route whose AS path holds our AS", 30*time.Second, has("192.168.101.0/24", tor.Addr.String()))
	out, _ := bird.Ctl("show protocols all node_a")
	if !strings.Contains(out, "Established") {
		t.Fatalf("BIRD's side:\n%s", out)
	}
	t.Logf("BIRD's session:\n%s", out)
}

// TestBirdLearnsServiceRanges: Calico's serviceExternalIPs and
// serviceLoadBalancerIPs (static CIDRs) are advertised like
// serviceClusterIPs, to a real BIRD 2.
func TestBirdLearnsServiceRanges(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	bird := torBird(t, tor, a)
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		ServiceClusterIPs:      []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}},
		ServiceExternalIPs:     []api.ServiceClusterIP{{CIDR: "203.0.113.0/24"}},
		ServiceLoadBalancerIPs: []api.ServiceClusterIP{{CIDR: "198.51.100.0/24"}},
	}})
	c.applyTorPeer(tor, api.BGPPeerSpec{})
	out := bird.WaitCtl(t, "show route", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "10.96.0.0/12") && strings.Contains(s, "203.0.113.0/24") && strings.Contains(s, "198.51.100.0/24")
	})
	t.Logf("BIRD's routes:\n%s", out)
}

// TestBirdSeesCommunities: Calico's communities and prefixAdvertisements
// put standard and large communities on the routes a node originates
// inside the CIDR, and only there; removing them re-advertises without.
func TestBirdSeesCommunities(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	bird := torBird(t, tor, a)
	conf := &api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		ServiceClusterIPs: []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}},
		Communities:       []api.Community{{Name: "pods", Value: "65001:100"}},
		PrefixAdvertisements: []api.PrefixAdvertisement{
			{CIDR: "10.65.0.0/16", Communities: []string{"pods", "65001:1:2"}},
		},
	}}
	c.apply(conf)
	c.applyTorPeer(tor, api.BGPPeerSpec{})
	out := bird.WaitCtl(t, "show route 10.65.1.0/26 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "(65001,100)") && strings.Contains(s, "(65001, 1, 2)")
	})
	t.Logf("BIRD's route to the block:\n%s", out)
	svc := bird.WaitCtl(t, "show route 10.96.0.0/12 all", 30*time.Second, func(s string) bool { return strings.Contains(s, "10.96.0.0/12") })
	if strings.Contains(svc, "community") {
		t.Errorf("the service range outside the advertisement got communities:\n%s", svc)
	}
	conf.Spec.PrefixAdvertisements = nil
	c.apply(conf)
	bird.WaitCtl(t, "show route 10.65.1.0/26 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "10.65.1.0/26") && !strings.Contains(s, "community")
	})
}

// TestBirdBGPFilter: a BGPFilter on the ToR's BGPPeer rejects one of the
// two routes BIRD sends (import) and keeps the node's block from BIRD
// while its service range goes out (export). A BGPPeer naming a filter
// that does not exist keeps its session down rather than unfiltered.
func TestBirdBGPFilter(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	bird := torBird(t, tor, a, "192.168.100.0/24 blackhole", "192.168.200.0/24 blackhole")
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		ServiceClusterIPs: []api.ServiceClusterIP{{CIDR: "10.96.0.0/12"}}}})
	c.apply(&api.BGPFilter{Metadata: api.ObjectMeta{Name: "tor"}, Spec: api.BGPFilterSpec{
		ImportV4: []api.BGPFilterRule{{Action: "Reject", MatchOperator: "In", CIDR: "192.168.200.0/24"}},
		ExportV4: []api.BGPFilterRule{{Action: "Reject", MatchOperator: "Equal", CIDR: "10.65.1.0/26"}, {Action: "Accept"}},
	}})
	c.applyTorPeer(tor, api.BGPPeerSpec{Filters: []string{"tor"}})

	a.waitRoutes("the accepted route", 30*time.Second, has("192.168.100.0/24", tor.Addr.String()))
	out := bird.WaitCtl(t, "show route", 30*time.Second, func(s string) bool { return strings.Contains(s, "10.96.0.0/12") })
	if strings.Contains(out, "10.65.1.0/26") {
		t.Errorf("the export filter let the block out:\n%s", out)
	}
	if routes := a.sink().Routes; routes["192.168.200.0/24"] != "" {
		t.Errorf("the import filter let 192.168.200.0/24 in: %v", routes)
	}

	// A filter that does not exist: the session goes down, not open.
	c.applyTorPeer(tor, api.BGPPeerSpec{Filters: []string{"missing"}})
	a.waitPeers("session held down", 30*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, tor.Addr)
		return ok && !p.Established() && strings.Contains(p.Info, "does not exist")
	})
}

// TestBirdLocalASNumber: Calico's BGPPeer localASNumber. The node
// presents AS 65100 to BIRD instead of its own 64512; BIRD, configured
// to expect 65100, establishes and sees the node's block with that AS.
func TestBirdLocalASNumber(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab(t)
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol bgp node_a {
	local %[1]s as 65000;
	neighbor %[2]s as 65100;
	ipv4 { import all; export none; };
}
`, tor.Addr, a.host.Addr))
	c.applyTorPeer(tor, api.BGPPeerSpec{LocalASNumber: 65100})
	out := bird.WaitCtl(t, "show route 10.65.1.0/26 all", 30*time.Second, func(s string) bool {
		return strings.Contains(s, "BGP.as_path: 65100")
	})
	t.Logf("BIRD's route to the block:\n%s", out)
}
