package integration

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/status"
	"github.com/routed-net/routed/routed/status/statuscli"
)

// TestMesh: three nodes in a full mesh exchange their blocks; a released
// block is withdrawn; a node removed from the datastore is disconnected.
func TestMesh(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a := c.addNode("a", 1, nil, "10.65.1.0/26")
	b := c.addNode("b", 2, nil, "10.65.2.0/26")
	cc := c.addNode("c", 3, nil, "10.65.3.0/26")
	ip := func(n *node) string { return n.host.Addr.String() }

	start := time.Now()
	a.waitRoutes("learn b and c", 30*time.Second, has("10.65.2.0/26", ip(b), "10.65.3.0/26", ip(cc)))
	b.waitRoutes("learn a and c", 30*time.Second, has("10.65.1.0/26", ip(a), "10.65.3.0/26", ip(cc)))
	cc.waitRoutes("learn a and b", 30*time.Second, has("10.65.1.0/26", ip(a), "10.65.2.0/26", ip(b)))
	t.Logf("3-node mesh converged in %s", time.Since(start))
	a.waitPeers("mesh up", 10*time.Second, allEstablished(b.host.Addr, cc.host.Addr))

	// routedctl node status against the real socket: exit code 0.
	var out bytes.Buffer
	cmd := statusCmd(&out, "node", "status", "--status-socket", a.cfg.StatusSocket)
	if err := cmd.Execute(); err != nil {
		t.Fatalf("node status: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "routed process is running.") || strings.Count(out.String(), "| node-to-node mesh |") != 2 ||
		strings.Count(out.String(), "Established") != 2 {
		t.Fatalf("node status output:\n%s", out.String())
	}
	t.Logf("routedctl node status:\n%s", out.String())

	// A new block appears, a released one disappears.
	a.affinity("10.65.1.64/26", "confirmed", false)
	a.affinity("10.65.1.0/26", "confirmed", true)
	b.waitRoutes("a's new block, not the released one", 10*time.Second,
		func(m map[string]string) bool { return has("10.65.1.64/26", ip(a))(m) && lacks("10.65.1.0/26")(m) })

	// Node c leaves the datastore: a and b drop the session and its route.
	c.delete(api.KindNode, "c")
	a.waitPeers("c removed", 15*time.Second, allEstablished(b.host.Addr))
	a.waitRoutes("c's block withdrawn", 10*time.Second, lacks("10.65.3.0/26"))
	ps := cc.waitPeers("c disconnected", 15*time.Second, func(ps []status.Peer) bool {
		for _, p := range ps {
			if p.Established() {
				return false
			}
		}
		return len(ps) == 2
	})
	t.Logf("c's view once removed: %s / %s", ps[0].Info, ps[1].Info)
	out.Reset()
	err := statusCmd(&out, "node", "status", "--status-socket", cc.cfg.StatusSocket).Execute()
	var ee *statuscli.ExitError
	if !errors.As(err, &ee) || ee.Code != statuscli.ExitSessionDown {
		t.Fatalf("node status with sessions down: err %v, want exit code 2\n%s", err, out.String())
	}
}
