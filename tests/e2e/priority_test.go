package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// TestBGPFilterPriority: Calico's route priority in BGPFilters. A ToR
// (gobgpd, eBGP) announces three prefixes to node n2, whose BGPPeer
// names a filter: routes with community 65000:100 get setPriority 100,
// 10.x.202.0/24 gets 2000, the rest none. n2's kernel holds each at that
// metric (proto 82), the last at the default metric, as Calico's BIRD
// programs them (krt_metric = 2147483647 - LOCAL_PREF). Export rules
// match on priority: n2's own block (default priority 1024) reaches the
// ToR with the community of the priority-1024 rule, not that of the
// priority-100 one. Changing setPriority moves the route to the new
// metric and leaves one route of felix's for the prefix.
func TestBGPFilterPriority(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n2 := l.Topo.Nodes[1]
	a := l.Topo.SubnetA.Addr().As4()
	tor := addrIn(a, 77)
	ns, addr, err := l.AddHost(ctx, "tor", 77)
	if err != nil || addr.Addr() != tor {
		t.Fatalf("tor host: %v %v", addr, err)
	}
	const torAS = 65100
	g, err := l.StartGoBGP("tor", ns, tor, torAS, lab.GoBGPNeighbor{Addr: n2.Addr.Addr(), AS: l.Topo.NodeAS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	// A pod gives n2 a block to advertise.
	if _, err := l.AddPod(ctx, n2.Name, "prio-pod"); err != nil {
		t.Fatal(err)
	}
	p201 := fmt.Sprintf("10.%d.201.0/24", a[1])
	p202 := fmt.Sprintf("10.%d.202.0/24", a[1])
	p203 := fmt.Sprintf("10.%d.203.0/24", a[1])
	filter := func(prio int) string {
		return fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: BGPFilter
metadata: {name: prio}
spec:
  importV4:
  - action: Accept
    communities: {values: ["65000:100"]}
    operations: [{setPriority: {value: %d}}]
  - action: Accept
    matchOperator: Equal
    cidr: %s
    operations: [{setPriority: {value: 2000}}]
  - action: Accept
  exportV4:
  - action: Accept
    priority: 100
    operations: [{addCommunity: {value: "65000:1"}}]
  - action: Accept
    priority: 1024
    operations: [{addCommunity: {value: "65000:1024"}}]
  - action: Reject
---
apiVersion: projectcalico.org/v3
kind: BGPPeer
metadata: {name: tor}
spec: {node: %s, peerIP: %s, asNumber: %d, filters: [prio]}
`, prio, p202, n2.Name, tor, torAS)
	}
	if err := l.ApplyYAML(ctx, "prio.yaml", filter(100)); err != nil {
		t.Fatal(err)
	}
	if err := g.WaitEstablished(ctx, n2.Addr.Addr(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{p201, "community", "65000:100"}, {p202}, {p203}} {
		args := append([]string{"global", "rib", "add", "-a", "ipv4", c[0], "nexthop", tor.String()}, c[1:]...)
		if out, err := g.Run(ctx, args...); err != nil {
			t.Fatalf("announce %v: %v: %s", c, err, out)
		}
	}
	// route is n2's kernel route for dst, by `ip route`'s line.
	route := func(out, dst string) string {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, dst+" ") {
				return line
			}
		}
		return ""
	}
	waitRoutes := func(what string, ok func(string) bool) string {
		t.Helper()
		var out string
		testenv.Eventually(t, 60*time.Second, 250*time.Millisecond, func() string {
			var err error
			if out, err = l.NodeRoutes(ctx, n2.Name); err != nil || !ok(out) {
				return fmt.Sprintf("%s: %s: %v\n%s", n2.Name, what, err, out)
			}
			return ""
		})
		return out
	}
	via := "via " + tor.String()
	got := waitRoutes("the ToR's routes at their priorities", func(s string) bool {
		return hasLine(route(s, p201), via, "proto 82", "metric 100") && hasLine(route(s, p202), via, "proto 82", "metric 2000") &&
			hasLine(route(s, p203), via, "proto 82") && !strings.Contains(route(s, p203), "metric")
	})
	t.Logf("%s:\n%s", n2.Name, got)

	// n2's block reaches the ToR with the priority-1024 rule's community
	// only.
	block := ""
	for _, line := range strings.Split(got, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "blackhole" {
			block = f[1]
		}
	}
	if block == "" {
		t.Fatalf("%s has no block:\n%s", n2.Name, got)
	}
	exact1 := regexp.MustCompile(`65000:1\b`)
	testenv.Eventually(t, 60*time.Second, 250*time.Millisecond, func() string {
		out, err := g.Run(ctx, "global", "rib", "-a", "ipv4", block)
		if err == nil && strings.Contains(out, "65000:1024") && !exact1.MatchString(out) {
			t.Logf("ToR's route for %s:\n%s", block, out)
			return ""
		}
		return fmt.Sprintf("the ToR's route for n2's block %s: want community 65000:1024 and not 65000:1: %v\n%s", block, err, out)
	})

	// A new setPriority moves the route; felix keeps one route for it.
	if err := l.ApplyYAML(ctx, "prio.yaml", filter(300)); err != nil {
		t.Fatal(err)
	}
	got = waitRoutes("the route at its new priority, and no other", func(s string) bool {
		return hasLine(route(s, p201), via, "proto 82", "metric 300") && strings.Count(s, p201+" ") == 1
	})
	t.Logf("%s after setPriority 300:\n%s", n2.Name, got)
}

// addrIn is host number n in the /24 of a.
func addrIn(a [4]byte, n byte) netip.Addr {
	a[3] = n
	return netip.AddrFrom4(a)
}
