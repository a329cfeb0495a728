package felix_test

import (
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestWireguardForgedDeviceAddress: node-b's record claims node-a's pod
// address as its WireGuard device address (the security review's
// forgery). node-a keeps routing its pod to the pod, not through
// wg.routed, and does not put the address among node-b's allowed IPs;
// node-b's own device does not carry it. Then IPAM lends node-b
// 10.244.0.9 from node-a's block and node-b claims that: it is on
// node-b's device, routed to it by node-a and allowed. When the loan
// ends (an IPAM GC freed it) the address leaves node-b's device,
// node-a's routes and its allowed IPs, while the record still claims it.
// Each node logs the forged claim once, naming node and address.
func TestWireguardForgedDeviceAddress(t *testing.T) {
	l := newWGLab(t, nil)
	l.setWGAddrs()
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.waitPing(a, b.pod, 20*time.Second)
	claim := func(addr string) {
		l.mu.Lock()
		l.wgAddrs["node-b"] = addr
		l.mu.Unlock()
		l.feedNodes()
	}
	ip := func(n *wgNode, args ...string) string {
		out, _ := exec.Command("ip", append([]string{"-n", n.ns.Name}, args...)...).CombinedOutput()
		return string(out)
	}
	// state says where node-a routes addr, whether it allows it from
	// node-b and what node-b's device carries.
	state := func(addr string) (route string, allowed bool, dev string) {
		return ip(a, "route", "get", addr), slices.Contains(allowedIPs(t, a, "node-b"), addr+"/32"),
			ip(b, "-4", "-o", "addr", "show", "dev", "wg.routed")
	}

	claim(a.pod)
	nstest.Eventually(t, 20*time.Second, func() string {
		if out := ip(b, "-4", "-o", "addr", "show", "dev", "wg.routed"); strings.Contains(out, "inet ") {
			return "node-b's wg.routed carries an address while its record claims only node-a's pod's: " + out
		}
		return ""
	})
	// Both nodes refused the claim (node-a's plan has it, so the checks
	// below see the refusal, not a plan from before the claim).
	forged := "ignoring an address the node's record claims: WireGuard device address " + a.pod
	nstest.Eventually(t, 20*time.Second, func() string {
		for _, n := range []*wgNode{a, b} {
			if warnings(n, forged) == 0 {
				return n.name + " has not logged the refusal of node-b's claim of " + a.pod
			}
		}
		return ""
	})
	route, allowed, _ := state(a.pod)
	if strings.Contains(route, "wg.routed") || !strings.Contains(route, "calia1") || allowed {
		t.Errorf("forged claim of %s: node-a routes it %q (want via calia1), allowed from node-b %v", a.pod, route, allowed)
	}
	if err := exec.Command("ip", "netns", "exec", a.ns.Name, "ping", "-c", "1", "-W", "1", a.pod).Run(); err != nil {
		t.Errorf("node-a's host cannot reach its own pod under node-b's forged claim: %v", err)
	}

	lent := "10.244.0.9"
	for _, n := range l.nodes {
		n.f.OnBorrowedBlock(netip.MustParsePrefix(a.block), map[netip.Addr]string{netip.MustParseAddr(lent): "node-b"})
	}
	claim(lent)
	nstest.Eventually(t, 20*time.Second, func() string {
		route, allowed, dev := state(lent)
		if !strings.Contains(route, "dev wg.routed") || !allowed || !strings.Contains(dev, "inet "+lent+"/32") {
			return "lent " + lent + ": node-a routes it " + route + ", allowed " + map[bool]string{true: "yes", false: "no"}[allowed] + ", node-b's device carries " + dev
		}
		return ""
	})

	for _, n := range l.nodes {
		n.f.OnBorrowedBlock(netip.MustParsePrefix(a.block), nil)
	}
	nstest.Eventually(t, 20*time.Second, func() string {
		route, allowed, dev := state(lent)
		if strings.Contains(route, "wg.routed") || strings.Contains(route, "blackhole") || allowed || strings.Contains(dev, "inet ") {
			return "freed " + lent + ": node-a routes it " + route + ", allowed " + map[bool]string{true: "yes", false: "no"}[allowed] + ", node-b's device carries " + dev
		}
		return ""
	})
	for _, n := range []*wgNode{a, b} {
		if c := warnings(n, forged); c != 1 {
			t.Errorf("%s logged the refusal of node-b's claim of %s %d times, want once", n.name, a.pod, c)
		}
	}
}
