package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/routed-net/routed/tests/lab"
)

// TestDualStackLab: the lab's nodes get IPv6 subnets and addresses, BIRD
// peers with them in both families, every pod has an address of each,
// and every pair of pods reaches each other over both (ping and ping
// -6), same-subnet and across the router. The IPv6 routes have the
// shape the IPv4 ones have, node status prints the IPv6 sessions as
// Established, and BIRD learned every node's IPv6 block.
func TestDualStackLab(t *testing.T) {
	l := startLabWith(t, func(topo *lab.Topology) { *topo = topo.WithDualStack() })
	ctx := context.Background()
	var out strings.Builder
	rep := lab.Check(ctx, l, 2, &out)
	t.Log(out.String())
	if !rep.OK() || rep.Pairs6 != rep.Pairs || rep.Pairs6 == 0 {
		t.Fatalf("dual-stack lab check failed: %s", rep)
	}

	n1, n2 := l.Topo.Nodes[0], l.Topo.Nodes[1]
	routes, err := l.NodeRoutes(ctx, n1.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Pods() {
		if p.Node == n1.Name && !hasLine(routes, p.IP6+" dev cali", "proto 82") {
			t.Errorf("%s: no /128 route for local pod %s:\n%s", n1.Name, p.IP6, routes)
		}
	}
	if !hasLine(routes, "via "+n2.Addr6.Addr().String(), "proto 82") {
		t.Errorf("%s: no direct IPv6 route to same-subnet node %s's block:\n%s", n1.Name, n2.Name, routes)
	}
	if !hasLine(routes, "blackhole "+strings.TrimSuffix(l.Topo.Pool6CIDR, "::/48")) && !hasLine(routes, "unreachable "+strings.TrimSuffix(l.Topo.Pool6CIDR, "::/48")) {
		t.Errorf("%s: no blackhole for its own IPv6 block:\n%s", n1.Name, routes)
	}
	for _, n := range l.Topo.Nodes {
		s, err := l.NodeCtl(ctx, n.Name, "node", "status")
		if err != nil {
			t.Fatalf("node status on %s: %v\n%s", n.Name, err, s)
		}
		_, v6, ok := strings.Cut(s, "IPv6 BGP status")
		if !ok || strings.Contains(v6, "No IPv6 peers found.") || !strings.Contains(v6, "Established") {
			t.Errorf("%s: node status has no established IPv6 sessions:\n%s", n.Name, s)
		}
	}
	bird, err := l.Birdc(ctx, "show", "route", "table", "master6")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Pods() {
		// Each pod's block (a /122) is in the router's IPv6 table.
		prefix := p.IP6[:strings.LastIndex(p.IP6, ":")]
		if !strings.Contains(bird, prefix) {
			t.Errorf("BIRD has no IPv6 route towards pod %s (%s):\n%s", p.Name, p.IP6, bird)
		}
	}
}
