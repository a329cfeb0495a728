package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// newCluster6 is newCluster on a dual-stack lab: every node's Node has
// an IPv6 address too.
func newCluster6(t *testing.T) *cluster {
	c := newCluster(t)
	c.lab.EnableIPv6("fd00:77::/64")
	return c
}

func v4(n *node) string { return n.host.Addr.String() }
func v6(n *node) string { return n.host.Addr6.String() }

// TestMeshIPv6: dual-stack nodes mesh over both families with the mesh
// password (TCP MD5), each session carrying its own family only; a node
// with only an IPv6 address meshes over IPv6 with a derived router ID;
// IPv6 blocks go and come; node status and show route show the IPv6
// sessions and routes.
func TestMeshIPv6(t *testing.T) {
	t.Parallel()
	c := newCluster6(t)
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		NodeMeshPassword: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "mesh"}}}})
	a := c.addNode("a", 1, nil, "10.65.1.0/26", "fd00:65:1::/122")
	b := c.addNode("b", 2, nil, "10.65.2.0/26", "fd00:65:2::/122")
	cc := c.addNodeSpec("c", 3, nil, func(n *api.Node) { n.Spec.BGP.IPv4Address = "" },
		func(cfg *childConfig) { cfg.Blocks = []string{"fd00:65:3::/122"} })
	for _, n := range []*node{a, b, cc} {
		writeSecret(t, n, "bgp", "mesh", "mesh-secret")
	}

	start := time.Now()
	a.waitRoutes("b's blocks over each family, c's over IPv6", 30*time.Second,
		has("10.65.2.0/26", v4(b), "fd00:65:2::/122", v6(b), "fd00:65:3::/122", v6(cc)))
	b.waitRoutes("a's blocks over each family, c's over IPv6", 30*time.Second,
		has("10.65.1.0/26", v4(a), "fd00:65:1::/122", v6(a), "fd00:65:3::/122", v6(cc)))
	cc.waitRoutes("a's and b's IPv6 blocks", 30*time.Second, has("fd00:65:1::/122", v6(a), "fd00:65:2::/122", v6(b)))
	t.Logf("dual-stack mesh converged in %s", time.Since(start))

	// Each session carries one route of its own family: the IPv4
	// session no IPv6 route and the reverse.
	one := func(ps []status.Peer, addr string) bool {
		for _, p := range ps {
			if p.Address == addr {
				return p.Established() && p.Type == bgp.PeerTypeMesh && p.Received == 1 && p.Accepted == 1
			}
		}
		return false
	}
	a.waitPeers("b over both families, c over IPv6, one route each", 10*time.Second, func(ps []status.Peer) bool {
		return allEstablished(b.host.Addr, b.host.Addr6, cc.host.Addr6)(ps) && one(ps, v4(b)) && one(ps, v6(b)) && one(ps, v6(cc))
	})
	cc.waitPeers("IPv6 sessions only", 10*time.Second, allEstablished(a.host.Addr6, b.host.Addr6))

	// c has no IPv4 address: its router ID is derived, and its peers see it.
	proc, err := cc.Status.Process(context.Background())
	if err != nil || proc.RouterID == "" {
		t.Fatalf("c's process: %+v %v", proc, err)
	}
	a.waitPeers("c's derived router ID", 10*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, cc.host.Addr6)
		return ok && p.RouterID == proc.RouterID
	})

	var out bytes.Buffer
	if err := statusCmd(&out, "node", "status", "--status-socket", a.cfg.StatusSocket).Execute(); err != nil {
		t.Fatalf("node status: %v\n%s", err, out.String())
	}
	s := out.String()
	v6At := strings.Index(s, "IPv6 BGP status")
	if v6At < 0 || strings.Count(s[:v6At], "| node-to-node mesh |") != 1 || strings.Count(s[v6At:], "| node-to-node mesh |") != 2 ||
		strings.Count(s[v6At:], "Established") != 2 || strings.Contains(s, "No IPv6 peers found.") || !strings.Contains(s[v6At:], v6(cc)) {
		t.Fatalf("node status:\n%s", s)
	}
	t.Logf("routedctl node status:\n%s", s)
	out.Reset()
	if err := statusCmd(&out, "show", "route", "--status-socket", a.cfg.StatusSocket).Execute(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fd00:65:1::/122  " + v6(a) + "  local", "fd00:65:2::/122  " + v6(b) + "  " + v6(b) + "  *"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("show route lacks %q:\n%s", want, out.String())
		}
	}

	// A new IPv6 block appears, a released one disappears, everywhere.
	a.affinity("fd00:65:1::40/122", "confirmed", false)
	a.affinity("fd00:65:1::/122", "confirmed", true)
	for _, n := range []*node{b, cc} {
		n.waitRoutes("a's new IPv6 block, not the released one", 10*time.Second,
			func(m map[string]string) bool {
				return has("fd00:65:1::40/122", v6(a))(m) && lacks("fd00:65:1::/122")(m)
			})
	}
}

// TestBirdIPv6: BIRD 2 as an eBGP top-of-rack router over IPv6, with TCP
// MD5 and graceful restart: it learns each node's IPv6 block from that
// node only (eBGP peers get a node's own routes), the nodes learn its
// IPv6 route, a node's planned restart keeps its route at BIRD, and with
// keepOriginalNextHop a node passes on the other's block unchanged.
func TestBirdIPv6(t *testing.T) {
	t.Parallel()
	c, tor, a := torLab6(t)
	b := c.addNode("b", 2, nil, "10.65.2.0/26", "fd00:65:2::/122")
	for _, n := range []*node{a, b} {
		writeSecret(t, n, "bgp", "tor6", "v6-secret")
	}
	bird := bgptest.StartBird(t, tor, fmt.Sprintf(`
router id %[1]s;
protocol device {}
protocol static upstream6 {
	ipv6;
	route 2001:db8:100::/48 blackhole;
}
filter to_nodes { if net = 2001:db8:100::/48 then accept; reject; }
template bgp nodes {
	local %[2]s as 65000;
	password "v6-secret";
	graceful restart on;
	ipv6 { import all; export filter to_nodes; };
}
protocol bgp node_a from nodes { neighbor %[3]s as 64512; }
protocol bgp node_b from nodes { neighbor %[4]s as 64512; }
`, tor.Addr, tor.Addr6, a.host.Addr6, b.host.Addr6))
	// a knows b's block before its session with BIRD starts, so a's first
	// UPDATEs to BIRD would carry it if the own-routes rule missed IPv6.
	a.waitRoutes("b's IPv6 block over the mesh", 30*time.Second, has("fd00:65:2::/122", v6(b)))
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor6"}, Spec: api.BGPPeerSpec{PeerIP: tor.Addr6.String(), ASNumber: 65000,
		Password: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "tor6"}}}})

	for _, n := range []*node{a, b} {
		n.waitRoutes("BIRD's IPv6 route", 30*time.Second, has("2001:db8:100::/48", tor.Addr6.String()))
		n.waitPeers("IPv6 ToR session up", 10*time.Second, func(ps []status.Peer) bool {
			p, ok := findPeer(ps, tor.Addr6)
			return ok && p.Established() && p.Type == bgp.PeerTypeGlobal && p.PeerASN == 65000
		})
	}
	out := bird.WaitCtl(t, "show route", 20*time.Second, func(s string) bool {
		return strings.Contains(s, "fd00:65:1::/122") && strings.Contains(s, "fd00:65:2::/122")
	})
	t.Logf("BIRD's routes:\n%s", out)
	for _, n := range []*node{a, b} {
		block := map[*node]string{a: "fd00:65:1::/122", b: "fd00:65:2::/122"}[n]
		out, _ = bird.Ctl("show route " + block + " all")
		if !strings.Contains(out, "via "+v6(n)) || !strings.Contains(out, "64512") || strings.Count(out, "via ") != 1 {
			t.Fatalf("BIRD's routes to %s's block (want one, from %s):\n%s", n.name, n.name, out)
		}
	}

	// Planned restart of a: BIRD keeps a's block while a is away.
	a.stop()
	bird.WaitCtl(t, "show protocols node_a", 15*time.Second, func(s string) bool { return !strings.Contains(s, "Established") })
	if out, _ := bird.Ctl("show route fd00:65:1::/122"); !strings.Contains(out, "via "+v6(a)) {
		t.Fatalf("BIRD dropped a's IPv6 block during its graceful restart:\n%s", out)
	}
	a.start()
	bird.WaitCtl(t, "show protocols node_a", 30*time.Second, func(s string) bool { return strings.Contains(s, "Established") })
	a.waitRoutes("BIRD's IPv6 route after the restart", 30*time.Second, has("2001:db8:100::/48", tor.Addr6.String()))

	// keepOriginalNextHop: each node now also passes on the other's
	// block, with the originator's IPv6 address as next hop.
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "tor6"}, Spec: api.BGPPeerSpec{PeerIP: tor.Addr6.String(), ASNumber: 65000,
		KeepOriginalNextHop: true, Password: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "tor6"}}}})
	out = bird.WaitCtl(t, "show route fd00:65:2::/122 all", 30*time.Second, func(s string) bool {
		return strings.Count(s, "via "+v6(b)) == 2 && strings.Contains(s, "[node_a ")
	})
	t.Logf("BIRD's paths to b's block with keepOriginalNextHop:\n%s", out)
}

// TestRouteReflectorIPv6: with the mesh off, a routed route reflector
// reflects IPv6 blocks between its clients over IPv6 sessions, keeping
// the originator's next hop, beside the IPv4 sessions.
func TestRouteReflectorIPv6(t *testing.T) {
	t.Parallel()
	c := newCluster6(t)
	c.meshOff()
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "peer-with-rrs"},
		Spec: api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"}})
	rr := c.addNodeSpec("rr", 11, map[string]string{"route-reflector": "true"},
		func(n *api.Node) { n.Spec.BGP.RouteReflectorClusterID = "224.0.0.1" }, func(*childConfig) {})
	c1 := c.addNode("c1", 1, nil, "10.65.1.0/26", "fd00:65:1::/122")
	c2 := c.addNode("c2", 2, nil, "10.65.2.0/26", "fd00:65:2::/122")

	c1.waitRoutes("c2's blocks through the RR", 30*time.Second, has("10.65.2.0/26", v4(c2), "fd00:65:2::/122", v6(c2)))
	c2.waitRoutes("c1's blocks through the RR", 30*time.Second, has("10.65.1.0/26", v4(c1), "fd00:65:1::/122", v6(c1)))
	c1.waitPeers("only the RR, over both families", 10*time.Second, allEstablished(rr.host.Addr, rr.host.Addr6))
	rr.waitPeers("clients over both families", 10*time.Second, func(ps []status.Peer) bool {
		n := 0
		for _, p := range ps {
			if p.Type == bgp.PeerTypeRouteReflector && p.Established() {
				n++
			}
		}
		return n == 4
	})
	routes, err := c1.Status.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range routes {
		if r.Prefix == "fd00:65:2::/122" && r.Best {
			found = r.NextHop == v6(c2) && r.Peer == v6(rr)
		}
	}
	if !found {
		t.Fatalf("c1's best route to c2's IPv6 block is not via c2 from the RR: %+v", routes)
	}
}

// TestEmptyASPathIPv6: an IPv6 route with an empty AS_PATH from an eBGP
// peer over IPv6 is dropped (routed-ebgp-empty-as-path has /128
// neighbor entries), while the same peer's next, well-formed route is
// learned with its IPv6 next hop.
func TestEmptyASPathIPv6(t *testing.T) {
	t.Parallel()
	c := newCluster6(t)
	a := c.addNode("a", 1, nil, "10.65.1.0/26", "fd00:65:1::/122")
	r := c.lab.AddHost("ebgp6", 60)
	const peerAS = 4200000002
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "ebgp6"}, Spec: api.BGPPeerSpec{PeerIP: r.Addr6.String(), ASNumber: peerAS}})
	rp := dialRaw(t, r, a.host.Addr6, peerAS)
	defer rp.c.Close()

	origin := attr(0x40, 1, []byte{0})
	bad, marker := netip.MustParsePrefix("2001:db8:bad::/48"), netip.MustParsePrefix("2001:db8:600d::/48")
	rp.send(t, update6(origin, attr(0x40, 2, nil), mpReach6(r.Addr6, bad)))
	rp.send(t, update6(origin, attr(0x40, 2, asPath4(peerAS)), mpReach6(r.Addr6, marker)))
	// UPDATEs of one session are handled in order: once the second is
	// learned, the first was judged.
	a.waitRoutes("the well-formed IPv6 route", 20*time.Second, has(marker.String(), r.Addr6.String()))
	if nh, learned := a.sink().Routes[bad.String()]; learned {
		t.Fatalf("IPv6 route with an empty AS_PATH from an eBGP peer learned (via %s)", nh)
	}
}
