package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// vxlanTopology is the lab with VXLAN CrossSubnet and no BGP anywhere:
// no BIRD, no session to the route reflector. Routes come from the
// datastore alone.
func vxlanTopology(t *lab.Topology) {
	t.VXLANMode, t.NoRouterBGP, t.NoNodeBGP = "CrossSubnet", true, true
}

// blockLine finds the kernel route line for the lab's block (a /26, an
// IPv6 /122) holding ip.
func blockLine(routes, ip string) string {
	a := netip.MustParseAddr(ip)
	bits := 26
	if a.Is6() {
		bits = 122
	}
	block := netip.PrefixFrom(a, bits).Masked().String()
	for _, line := range strings.Split(routes, "\n") {
		if strings.HasPrefix(line, block+" ") {
			return line
		}
	}
	return ""
}

// tunnelCounters pings every pair of pods on different nodes at the
// address addr picks and checks dev's transmit counter on the sender:
// it moves by at least the pings for a cross-subnet pair, not at all
// for a same-subnet one.
func tunnelCounters(t *testing.T, l *lab.Lab, dev string, addr func(lab.Pod) string) {
	t.Helper()
	ctx := context.Background()
	subnet := map[string]string{}
	for _, n := range l.Topo.Nodes {
		subnet[n.Name] = n.Subnet
	}
	const count = 5
	crossPairs, samePairs := 0, 0
	pods := l.Pods()
	for _, from := range pods {
		for _, to := range pods {
			if from.Node == to.Node {
				continue
			}
			before, err := l.TunnelTxPackets(ctx, from.Node, dev)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := l.Ping(ctx, from, addr(to), count); err != nil || got != count {
				t.Fatalf("%s -> %s (%s): %d/%d replies (%v)", from.Name, to.Name, addr(to), got, count, err)
			}
			after, err := l.TunnelTxPackets(ctx, from.Node, dev)
			if err != nil {
				t.Fatal(err)
			}
			cross := subnet[from.Node] != subnet[to.Node]
			switch {
			case cross && after-before < count:
				t.Errorf("%s -> %s crosses subnets but %s on %s sent %d packets for %d pings", from.Name, to.Name, dev, from.Node, after-before, count)
			case !cross && after != before:
				t.Errorf("%s -> %s is on one subnet but %s on %s sent %d packets", from.Name, to.Name, dev, from.Node, after-before)
			}
			if cross {
				crossPairs++
			} else {
				samePairs++
			}
		}
	}
	t.Logf("tunnel counters: %d cross-subnet pairs went through %s, %d same-subnet pairs did not", crossPairs, dev, samePairs)
}

// TestVXLANCrossSubnetWithoutBGP: with VXLAN CrossSubnet and BGP off,
// every pod reaches every other pod; cross-subnet blocks are routed via
// the remote VTEP on vxlan.routed and same-subnet blocks directly; the
// tunnel's counters move for cross-subnet pairs only. Switching the pool
// to Never and back converges on the running cluster.
func TestVXLANCrossSubnetWithoutBGP(t *testing.T) {
	l := startLabWith(t, vxlanTopology)
	ctx := context.Background()
	var out strings.Builder
	rep := lab.Check(ctx, l, 1, &out)
	t.Log(out.String())
	if !rep.OK() || rep.Pods != 4 {
		t.Fatalf("lab check with VXLAN CrossSubnet and no BGP: %s", rep)
	}
	for _, n := range l.Topo.Nodes {
		if s, err := l.NodeCtl(ctx, n.Name, "node", "status"); err != nil || strings.Contains(s, "Established") {
			t.Errorf("%s has BGP sessions (want none): %v\n%s", n.Name, err, s)
		}
	}
	// Every node's VTEP MAC is on its Node (the address is checked by the routes below).
	wide, err := l.Ctl(ctx, "get", "nodes", "-o", "wide")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Topo.Nodes {
		if !hasLine(wide, n.Name, felix.VXLANMAC(n.Name).String()) {
			t.Errorf("routedctl get nodes -o wide shows no VXLAN MAC for %s:\n%s", n.Name, wide)
		}
	}
	pods := l.Pods()
	podOn := map[string]lab.Pod{}
	for _, p := range pods {
		podOn[p.Node] = p
	}
	subnet := map[string]string{}
	for _, n := range l.Topo.Nodes {
		subnet[n.Name] = n.Subnet
	}
	n1, n2, n3, n4 := l.Topo.Nodes[0], l.Topo.Nodes[1], l.Topo.Nodes[2], l.Topo.Nodes[3]
	routes, err := l.NodeRoutes(ctx, n1.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{n3.Name, n4.Name} {
		if line := blockLine(routes, podOn[n].IP); !strings.Contains(line, "dev vxlan.routed") || !strings.Contains(line, "onlink") || !strings.Contains(line, "proto 82") {
			t.Errorf("%s: %s's block not via its VTEP on vxlan.routed onlink: %q\n%s", n1.Name, n, line, routes)
		}
	}
	if line := blockLine(routes, podOn[n2.Name].IP); !strings.Contains(line, "via "+n2.Addr.Addr().String()+" dev eth0") {
		t.Errorf("%s: same-subnet %s's block not routed directly: %q\n%s", n1.Name, n2.Name, line, routes)
	}

	// Tunnel counters: a cross-subnet pair goes through vxlan.routed, a
	// same-subnet pair never does.
	tunnelCounters(t, l, felix.VXLANDevice, func(p lab.Pod) string { return p.IP })

	// Switch the pool to Never on the running cluster: vxlan.routed's
	// routes give way to plain ones (cross-subnet now via the router,
	// which has no pod routes without BGP), same-subnet pods still talk.
	start := time.Now()
	if err := l.SetPoolEncap(ctx, "Never", "Never"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
		routes, err := l.NodeRoutes(ctx, n1.Name)
		links, lerr := l.NodeLinks(ctx, n1.Name)
		line := blockLine(routes, podOn[n3.Name].IP)
		if err != nil || lerr != nil || line == "" || strings.Contains(line, "vxlan.routed") || strings.Contains(links, "vxlan.routed") {
			return fmt.Sprintf("%s still on VXLAN: route %q (%v %v)", n1.Name, line, err, lerr)
		}
		return ""
	})
	t.Logf("VXLAN -> Never converged on %s in %v", n1.Name, time.Since(start).Round(time.Millisecond))
	if got, err := l.Ping(ctx, podOn[n1.Name], podOn[n2.Name].IP, 3); err != nil || got != 3 {
		t.Errorf("same-subnet pods after switching to Never: %d/3 (%v)", got, err)
	}

	// And back to VXLAN CrossSubnet: cross-subnet pods talk again.
	start = time.Now()
	if err := l.SetPoolEncap(ctx, "Never", "CrossSubnet"); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		for _, pair := range [][2]lab.Pod{{podOn[n1.Name], podOn[n3.Name]}, {podOn[n4.Name], podOn[n2.Name]}} {
			if got, err := l.Ping(ctx, pair[0], pair[1].IP, 1); err != nil || got != 1 {
				return fmt.Sprintf("%s -> %s unreachable (%v)", pair[0].Name, pair[1].Name, err)
			}
		}
		return ""
	})
	t.Logf("Never -> VXLAN CrossSubnet converged (cross-subnet pings answered) in %v", time.Since(start).Round(time.Millisecond))
	routes, _ = l.NodeRoutes(ctx, n1.Name)
	if line := blockLine(routes, podOn[n3.Name].IP); !strings.Contains(line, "dev vxlan.routed") {
		t.Errorf("after switching back, %s's block is %q, want dev vxlan.routed", n3.Name, line)
	}
}
