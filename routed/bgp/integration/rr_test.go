package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/bgp"
	"github.com/routed-net/routed/routed/status"
)

// TestMeshToRouteReflectors turns two nodes into route reflectors of one
// cluster, peers everyone with them, then switches the mesh off. Clients
// must never lose a route on the way.
func TestMeshToRouteReflectors(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	rrLabel := map[string]string{"route-reflector": "true"}
	rr1 := c.addNode("rr1", 11, rrLabel)
	rr2 := c.addNode("rr2", 12, rrLabel)
	clients := []*node{
		c.addNode("c1", 1, nil, "10.65.1.0/26"),
		c.addNode("c2", 2, nil, "10.65.2.0/26"),
		c.addNode("c3", 3, nil, "10.65.3.0/26"),
	}
	all := append([]*node{rr1, rr2}, clients...)
	want := func(except *node) func(map[string]string) bool {
		var pairs []string
		for i, n := range clients {
			if n != except {
				pairs = append(pairs, fmt.Sprintf("10.65.%d.0/26", i+1), n.host.Addr.String())
			}
		}
		return func(m map[string]string) bool { return has(pairs...)(m) && len(m) == len(pairs)/2 }
	}
	for _, n := range all {
		n.waitRoutes("mesh routes", 30*time.Second, want(n))
	}

	// Make rr1/rr2 route reflectors and peer every node with them.
	for _, n := range []*node{rr1, rr2} {
		c.apply(&api.Node{Metadata: api.ObjectMeta{Name: n.name, Labels: rrLabel}, Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{
			IPv4Address: n.host.Addr.String() + "/24", RouteReflectorClusterID: "224.0.0.1"}}})
	}
	c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "peer-with-rrs"},
		Spec: api.BGPPeerSpec{NodeSelector: "all()", PeerSelector: "route-reflector == 'true'"}})
	rr1.waitPeers("clients marked", 20*time.Second, func(ps []status.Peer) bool {
		n := 0
		for _, p := range ps {
			if p.Type == bgp.PeerTypeRouteReflector && p.Established() {
				n++
			}
		}
		return n == 4
	})

	c.meshOff()
	for _, cl := range clients {
		cl.waitPeers("only the RRs", 20*time.Second, allEstablished(rr1.host.Addr, rr2.host.Addr))
	}
	for _, n := range all {
		n.waitRoutes("routes through the RRs", 20*time.Second, want(n))
	}
	// Clients learned every route before and after; none was withdrawn.
	for _, cl := range clients {
		if w := cl.sink().Withdrawals; len(w) != 0 {
			t.Errorf("client %s lost routes during the switch: %v", cl.name, w)
		}
	}
	// Reflected routes keep the originator's next hop.
	routes, err := clients[0].Status.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Prefix == "10.65.2.0/26" && r.Best && (r.NextHop != clients[1].host.Addr.String() ||
			(r.Peer != rr1.host.Addr.String() && r.Peer != rr2.host.Addr.String())) {
			t.Errorf("c1's best route to c2's block: %+v", r)
		}
	}
}

// TestMD5 peers two nodes through node-specific BGPPeers with passwords
// from mounted secrets: different passwords keep the session down with a
// clear INFO; the same password brings it up.
func TestMD5(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.meshOff()
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	writeSecret(t, a, "bgp", "pw", "password-a")
	writeSecret(t, b, "bgp", "pw", "password-b")
	for _, pair := range [][2]*node{{a, b}, {b, a}} {
		c.apply(&api.BGPPeer{Metadata: api.ObjectMeta{Name: "md5-" + pair[0].name}, Spec: api.BGPPeerSpec{
			Node: pair[0].name, PeerIP: pair[1].host.Addr.String(), ASNumber: 64512,
			// One way each: the peerIP is a node's, which Calico (Auto)
			// would peer back.
			ReversePeering: api.ReversePeeringManual,
			Password:       &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "pw"}}}})
	}
	ps := a.waitPeers("MD5 mismatch reported", 30*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, b.host.Addr)
		return ok && !p.Established() && strings.Contains(p.Info, "MD5")
	})
	p, _ := findPeer(ps, b.host.Addr)
	t.Logf("wrong password: %s | %s | %s", p.Type, p.State, p.Info)
	if p.Type != bgp.PeerTypeNodeSpecific {
		t.Errorf("peer type %q", p.Type)
	}
	if _, ok := a.sink().Routes["10.65.2.0/26"]; ok {
		t.Fatal("route learned over a session that should be down")
	}
	writeSecret(t, b, "bgp", "pw", "password-a") // confd re-reads secrets every second here
	a.waitPeers("same password: up", 30*time.Second, allEstablished(b.host.Addr))
	a.waitRoutes("b's block", 10*time.Second, has("10.65.2.0/26", b.host.Addr.String()))

	// Removing a's BGPPeer disconnects the session on both sides.
	c.delete(api.KindBGPPeer, "md5-a")
	a.waitPeers("peer removed", 15*time.Second, func(ps []status.Peer) bool { return len(ps) == 0 })
	b.waitPeers("a hung up", 15*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, a.host.Addr)
		return ok && !p.Established()
	})
	b.waitRoutes("a's block gone", 10*time.Second, lacks("10.65.1.0/26"))

	for _, l := range []string{a.out.String(), b.out.String()} {
		if strings.Contains(l, "password-a") || strings.Contains(l, "password-b") {
			t.Fatal("a password appeared in the logs")
		}
	}
}

func writeSecret(t *testing.T, n *node, name, key, value string) {
	t.Helper()
	dir := filepath.Join(n.cfg.SecretsDir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Write and rename, as the kubelet updates a mounted secret.
	tmp := filepath.Join(dir, "."+key+".tmp")
	if err := os.WriteFile(tmp, []byte(value), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, key)); err != nil {
		t.Fatal(err)
	}
}

// TestGracefulRestart stops a node the planned way (SIGTERM: no Cease)
// and starts it again: its peers keep its route throughout.
func TestGracefulRestart(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	b.waitRoutes("a's block", 30*time.Second, has("10.65.1.0/26", a.host.Addr.String()))

	a.stop()
	b.waitPeers("a gone", 10*time.Second, func(ps []status.Peer) bool { return len(ps) == 1 && !ps[0].Established() })
	if _, ok := b.sink().Routes["10.65.1.0/26"]; !ok {
		t.Fatal("b dropped a's route when a went")
	}
	a.start()
	// The status socket serves before the speaker runs, and the
	// speaker says it restarts from its first step (it stays so).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		proc, err := a.Status.Process(context.Background())
		if err == nil && proc.Restarting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("restarted node does not know it restarts within 20 s: %+v %v", proc, err)
		}
	}
	b.waitPeers("a back", 30*time.Second, allEstablished(a.host.Addr))
	a.waitRoutes("a relearns b's block", 30*time.Second, has("10.65.2.0/26", b.host.Addr.String()))
	// A block a claims now is sent after its End-of-RIB, on the same
	// session: once b has it, b has processed the End-of-RIB (which clears
	// every stale route a did not send again).
	a.affinity("10.65.1.64/26", bgp.AffinityConfirmed, false)
	b.waitRoutes("a's block claimed after the restart", 30*time.Second, has("10.65.1.64/26", a.host.Addr.String()))
	if w := b.sink().Withdrawals; len(w) != 0 {
		t.Fatalf("b withdrew %v during a's graceful restart (from the stop to after a's End-of-RIB)", w)
	}
	if _, ok := b.sink().Routes["10.65.1.0/26"]; !ok {
		t.Fatal("a's route missing after its restart")
	}
}

// TestMeshMD5 uses Calico's nodeMeshPassword: every node-to-node mesh
// session carries the mounted secret as TCP MD5 key; a node with another
// password stays down, with the same password the session comes up.
func TestMeshMD5(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{
		NodeMeshPassword: &api.PasswordSource{SecretKeyRef: &api.SecretKeyRef{Name: "bgp", Key: "mesh"}}}})
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	writeSecret(t, a, "bgp", "mesh", "mesh-one")
	writeSecret(t, b, "bgp", "mesh", "mesh-two")
	a.waitPeers("MD5 mismatch on the mesh", 30*time.Second, func(ps []status.Peer) bool {
		p, ok := findPeer(ps, b.host.Addr)
		return ok && !p.Established() && p.Type == bgp.PeerTypeMesh && strings.Contains(p.Info, "MD5")
	})
	if _, ok := a.sink().Routes["10.65.2.0/26"]; ok {
		t.Fatal("route learned over a mesh session with the wrong password")
	}
	writeSecret(t, b, "bgp", "mesh", "mesh-one")
	a.waitPeers("same mesh password: up", 30*time.Second, allEstablished(b.host.Addr))
	a.waitRoutes("b's block", 10*time.Second, has("10.65.2.0/26", b.host.Addr.String()))
}
