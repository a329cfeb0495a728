package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/tests/lab"
)

// TestVXLANv6CrossSubnetWithoutBGP: a dual-stack lab whose IPv4 and IPv6
// pools are both VXLAN CrossSubnet, with no BGP anywhere: every pod
// reaches every other over IPv4 and IPv6; each node has vxlan-v6.routed
// beside vxlan.routed and records its IPv6 VTEP (ipv6VXLANTunnelAddr,
// vxlanTunnelMACAddrV6); IPv6 blocks on the other subnet are routed via
// the remote IPv6 VTEP on vxlan-v6.routed onlink and same-subnet ones
// directly; vxlan-v6.routed's counters move for cross-subnet IPv6 pings
// only. The router has no pod routes at all, so a cross-subnet answer
// can only have come through the tunnel.
func TestVXLANv6CrossSubnetWithoutBGP(t *testing.T) {
	l := startLabWith(t, func(topo *lab.Topology) {
		*topo = topo.WithDualStack()
		vxlanTopology(topo)
		topo.Pool6VXLANMode = "CrossSubnet"
	})
	ctx := context.Background()
	var out strings.Builder
	rep := lab.Check(ctx, l, 1, &out)
	t.Log(out.String())
	if !rep.OK() || rep.Pods != 4 || rep.Pairs6 == 0 {
		t.Fatalf("dual-stack lab check with VXLAN CrossSubnet in both families and no BGP: %s", rep)
	}
	for _, n := range l.Topo.Nodes {
		if s, err := l.NodeCtl(ctx, n.Name, "node", "status"); err != nil || strings.Contains(s, "Established") {
			t.Errorf("%s has BGP sessions (want none): %v\n%s", n.Name, err, s)
		}
	}
	yaml, err := l.Ctl(ctx, "get", "nodes", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range l.Topo.Nodes {
		if !strings.Contains(yaml, "vxlanTunnelMACAddrV6: "+felix.VXLANMACV6(n.Name).String()) {
			t.Errorf("no IPv6 VXLAN MAC recorded for %s:\n%s", n.Name, yaml)
		}
	}
	if got := strings.Count(yaml, "ipv6VXLANTunnelAddr: "); got != len(l.Topo.Nodes) {
		t.Errorf("%d nodes record an ipv6VXLANTunnelAddr, want %d:\n%s", got, len(l.Topo.Nodes), yaml)
	}

	podOn := map[string]lab.Pod{}
	for _, p := range l.Pods() {
		podOn[p.Node] = p
	}
	n1, n2, n3 := l.Topo.Nodes[0], l.Topo.Nodes[1], l.Topo.Nodes[2]
	routes, err := l.NodeRoutes(ctx, n1.Name)
	if err != nil {
		t.Fatal(err)
	}
	if line := blockLine(routes, podOn[n3.Name].IP6); !strings.Contains(line, "dev "+felix.VXLANDeviceV6) || !strings.Contains(line, "onlink") || !strings.Contains(line, "proto 82") {
		t.Errorf("%s: %s's IPv6 block not via its VTEP on %s onlink: %q\n%s", n1.Name, n3.Name, felix.VXLANDeviceV6, line, routes)
	}
	if line := blockLine(routes, podOn[n2.Name].IP6); !strings.Contains(line, "via "+n2.Addr6.Addr().String()+" dev eth0") {
		t.Errorf("%s: same-subnet %s's IPv6 block not routed directly: %q\n%s", n1.Name, n2.Name, line, routes)
	}
	if line := blockLine(routes, podOn[n3.Name].IP); !strings.Contains(line, "dev "+felix.VXLANDevice) {
		t.Errorf("%s: %s's IPv4 block not on %s: %q", n1.Name, n3.Name, felix.VXLANDevice, line)
	}
	tunnelCounters(t, l, felix.VXLANDeviceV6, func(p lab.Pod) string { return p.IP6 })
}
