package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// TestReachableByKeepsTheSessionUp: Calico's BGPPeer reachableBy (for
// route servers that advertise routes covering their own address). A
// route server (gobgpd, iBGP) sits on a subnet of its own behind the
// lab's router; node n2 has no default route, so only reachableBy's
// route leads to it. The session comes up over the /32 felix programs
// through the gateway (routed's protocol, n2 only). The route server
// then announces its own /32 and its subnet with a next hop that leads
// nowhere, as a flapping route server would: n2 programs the subnet
// route, but the /32 stays through the gateway and the session stays
// Established. Dropping reachableBy hands the /32 to the learned route:
// the route through the gateway goes.
func TestReachableByKeepsTheSessionUp(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n2, n3 := l.Topo.Nodes[1], l.Topo.Nodes[2]
	if n2.Subnet != "a" || n3.Subnet != "b" {
		t.Fatalf("default topology changed: n2 on %s, n3 on %s", n2.Subnet, n3.Subnet)
	}
	a4 := l.Topo.SubnetA.Addr().As4()
	gw := netip.AddrFrom4([4]byte{a4[0], a4[1], a4[2], 1})    // the router on subnet a
	dead := netip.AddrFrom4([4]byte{a4[0], a4[1], a4[2], 99}) // no host there
	rsNet := netip.PrefixFrom(netip.AddrFrom4([4]byte{a4[0], a4[1], 9, 0}), 24)
	rtrAddr := netip.PrefixFrom(netip.AddrFrom4([4]byte{a4[0], a4[1], 9, 1}), 24)
	rs := netip.AddrFrom4([4]byte{a4[0], a4[1], 9, 2})

	// The route server's namespace, wired to the router.
	ns, veth := l.Topo.Prefix+"-rs", l.Topo.Prefix+"-vrs"
	rtr := l.Topo.RouterNS()
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	for _, c := range [][]string{
		{"netns", "add", ns},
		{"-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", rtr},
		{"-n", ns, "addr", "add", netip.PrefixFrom(rs, 24).String(), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", rtrAddr.Addr().String()},
		{"-n", rtr, "addr", "add", rtrAddr.String(), "dev", veth},
		{"-n", rtr, "link", "set", veth, "up"},
		// n2 reaches subnet b (the other nodes) but nothing else.
		{"-n", n2.Name, "route", "del", "default"},
		{"-n", n2.Name, "route", "add", l.Topo.SubnetB.String(), "via", gw.String()},
	} {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", c, err, out)
		}
	}
	conf := fmt.Sprintf("[global.config]\n  as = %d\n  router-id = %q\n[[neighbors]]\n  [neighbors.config]\n    neighbor-address = %q\n    peer-as = %d\n",
		l.Topo.NodeAS, rs, n2.Addr.Addr(), l.Topo.NodeAS)
	confPath := filepath.Join(t.TempDir(), "gobgpd.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(t.TempDir(), "gobgpd.log"))
	if err != nil {
		t.Fatal(err)
	}
	gobgpd := exec.Command("ip", "netns", "exec", ns, "gobgpd", "-f", confPath, "--api-hosts", "127.0.0.1:50051")
	gobgpd.Stdout, gobgpd.Stderr = logf, logf
	if err := gobgpd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = gobgpd.Process.Kill()
		_ = gobgpd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(logf.Name())
			t.Logf("gobgpd log:\n%s", out)
		}
	})
	gobgp := func(args ...string) (string, error) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, "ip", append([]string{"netns", "exec", ns, "gobgp", "-u", "127.0.0.1", "-p", "50051"}, args...)...).CombinedOutput()
		return string(out), err
	}
	peer := func(reachableBy string) {
		t.Helper()
		y := fmt.Sprintf("apiVersion: projectcalico.org/v3\nkind: BGPPeer\nmetadata: {name: route-server}\nspec: {node: %s, peerIP: %s, asNumber: %d%s}\n",
			n2.Name, rs, l.Topo.NodeAS, reachableBy)
		if err := l.ApplyYAML(ctx, "route-server", y); err != nil {
			t.Fatal(err)
		}
	}
	// waitRoutes polls a node's routes until ok holds.
	waitRoutes := func(node, what string, ok func(string) bool) string {
		t.Helper()
		var out string
		testenv.Eventually(t, 60*time.Second, 250*time.Millisecond, func() string {
			var err error
			if out, err = l.NodeRoutes(ctx, node); err != nil || !ok(out) {
				return fmt.Sprintf("%s: %s: %v\n%s", node, what, err, out)
			}
			return ""
		})
		return out
	}
	established := func(what string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, 250*time.Millisecond, func() string {
			if out, err := gobgp("neighbor"); err != nil || !hasLine(out, n2.Addr.Addr().String(), "Establ") {
				return fmt.Sprintf("route server: no session with %s %s: %v\n%s", n2.Name, what, err, out)
			}
			return ""
		})
	}
	viaGW := func(s string) bool { return hasLine(s, rs.String()+" via "+gw.String(), "proto 82") }

	peer(", reachableBy: " + gw.String())
	waitRoutes(n2.Name, "the route to the route server through "+gw.String(), viaGW)
	established("over the reachableBy route")
	if out, err := l.NodeRoutes(ctx, n3.Name); err != nil || strings.Contains(out, rs.String()+" ") {
		t.Fatalf("%s, which the BGPPeer does not apply to, has a route to the route server: %v\n%s", n3.Name, err, out)
	}

	for _, p := range []string{rs.String() + "/32", rsNet.String()} {
		if out, err := gobgp("global", "rib", "add", "-a", "ipv4", p, "nexthop", dead.String()); err != nil {
			t.Fatalf("announce %s: %v: %s", p, err, out)
		}
	}
	got := waitRoutes(n2.Name, "the route server's subnet route learned", func(s string) bool {
		return hasLine(s, rsNet.String()+" via "+dead.String(), "proto 82")
	})
	if !viaGW(got) {
		t.Fatalf("the route server's own /32 left the gateway once it announced it:\n%s", got)
	}
	// Wait until n2 has taken in the route server's own /32 (show route
	// lists it as set aside for reachableBy), then check the session has
	// not moved.
	testenv.Eventually(t, 60*time.Second, 250*time.Millisecond, func() string {
		out, err := l.NodeCtl(ctx, n2.Name, "show", "route")
		if err != nil || !hasLine(out, rs.String()+"/32", "filtered: reachable-by") {
			return fmt.Sprintf("%s show route: the route server's own /32 never listed as set aside for reachableBy: %v\n%s", n2.Name, err, out)
		}
		return ""
	})
	established("after it announced its own address elsewhere")
	if out, _ := l.NodeRoutes(ctx, n2.Name); !viaGW(out) {
		t.Fatalf("the /32 through the gateway went:\n%s", out)
	}
	// show route says which route the kernel has for the peer.
	ctlOut, err := l.NodeCtl(ctx, n2.Name, "show", "route")
	if err != nil || !hasLine(ctlOut, rs.String()+"/32", "filtered: reachable-by") || !hasLine(ctlOut, rsNet.String(), "yes") {
		t.Errorf("%s show route: want the learned /32 listed as set aside for reachableBy and the /24 programmed: %v\n%s", n2.Name, err, ctlOut)
	}
	t.Logf("%s with reachableBy:\n%s\n%s", n2.Name, got, ctlOut)

	// Without reachableBy the learned /32 (through the dead next hop)
	// takes over, which is what reachableBy is there to prevent.
	peer("")
	got = waitRoutes(n2.Name, "the route through the gateway gone", func(s string) bool { return !viaGW(s) })
	t.Logf("%s without reachableBy:\n%s", n2.Name, got)
}
