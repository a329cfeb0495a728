package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// TestRogueNodeCannotSteerTraffic joins a rogue BGP speaker (gobgpd) to
// the lab as a Node and has it announce what a hijacker would: a default
// route, the service range, a /32 of a pod in another node's block and a
// /27 inside a node's own block. Every
// node's routed must list each as filtered with a reason, none may reach
// any node's kernel, and pod traffic keeps flowing.
func TestRogueNodeCannotSteerTraffic(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n := l.Topo.Nodes
	p2 := mustPod(t, l, n[1].Name, "g2")
	p3 := mustPod(t, l, n[2].Name, "g3")
	rogue, err := l.StartRogue(ctx, "rogue", 66)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rogue.Stop)

	// prefix -> reason on every node, and on the node whose own block
	// it falls in.
	slash27 := netip.PrefixFrom(netip.MustParseAddr(p3.IP), 27).Masked().String()
	type want struct{ reason, owner, ownerReason string }
	bad := map[string]want{
		"0.0.0.0/0":    {"cluster-peer-outside-pools", "", ""},
		"10.96.0.0/12": {"cluster-peer-outside-pools", "", ""}, // the service range
		p2.IP + "/32":  {"not-in-ipam", n[1].Name, "own-block"},
		slash27:        {"not-in-ipam", n[2].Name, "own-block"},
	}
	for p := range bad {
		if err := rogue.Announce(ctx, netip.MustParsePrefix(p)); err != nil {
			t.Fatalf("announce %s: %v", p, err)
		}
	}
	rogueVia := "via " + rogue.Addr.String() + " "
	for _, node := range n {
		testenv.Eventually(t, 30*time.Second, 250*time.Millisecond, func() string {
			out, err := l.NodeCtl(ctx, node.Name, "show", "route")
			missing := ""
			for p, w := range bad {
				reason := w.reason
				if node.Name == w.owner {
					reason = w.ownerReason
				}
				if !hasLine(out, p+" ", rogue.Addr.String(), "filtered: "+reason) {
					missing += fmt.Sprintf(" %s (%s)", p, reason)
				}
			}
			if err == nil && missing == "" {
				return ""
			}
			return fmt.Sprintf("%s: show route does not list as filtered:%s (%v)\n%s", node.Name, missing, err, out)
		})
		// Every route felix plans was planned without them: none is in
		// the kernel.
		routes, err := l.NodeRoutes(ctx, node.Name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(routes+"\n", rogueVia) || strings.Contains(routes, rogue.Addr.String()+" proto 82") {
			t.Errorf("%s: a rogue route reached the kernel:\n%s", node.Name, routes)
		}
		m, err := l.NodeMetricFamilies(ctx, node.Name)
		if err != nil {
			t.Fatal(err)
		}
		if v, ok := m.Sum("routed_felix_learned_routes_filtered", map[string]string{"reason": "cluster-peer-outside-pools"}); v != 2 {
			t.Errorf("%s: routed_felix_learned_routes_filtered{reason=cluster-peer-outside-pools} = %v (found %v), want 2", node.Name, v, ok)
		}
	}
	// Good routes still flow, both ways across the subnets.
	reach(t, l, p2, p3.IP)
	reach(t, l, p3, p2.IP)
}
