package felix_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestWireguardHostToPodStrictRPFilter: with their Nodes' WireGuard
// device addresses (spec.wireguard, as routed/tunneladdr allocates them
// from each node's block) and net.ipv4.conf.all.rp_filter strict (1) or
// loose (2) on both nodes, each node's host pings the other node's pod:
// felix puts the node's address on its device, routes the remote block
// through the device with that address as the source, and routes the
// peer's address through the device and into its allowed IPs, so the
// receiving node's reverse-path check finds the source behind its own
// device. The pod's address is reachable only through the device (the
// uplink's default gateway does not exist), so each answered ping
// crossed it. No rp_filter warning is left to give. Without the device
// addresses (the old code) the same pings are dropped by the reverse
// path check: see TestWireguardDeviceRPFilter's "all" cases.
func TestWireguardHostToPodStrictRPFilter(t *testing.T) {
	for _, all := range []string{"1", "2"} {
		t.Run("all "+all, func(t *testing.T) {
			l := newWGLab(t, func(node string, c *felix.Config) {
				setConf(t, c.NetNSPath, "rp_filter", all, "all", "default")
			})
			l.setWGAddrs()
			a, b := l.nodes["node-a"], l.nodes["node-b"]
			l.waitPing(a, b.pod, 20*time.Second)
			own := map[string]string{"node-a": "10.244.0.1", "node-b": "10.244.1.1"}
			for _, pair := range [][2]*wgNode{{b, a}, {a, b}} {
				from, to := pair[0], pair[1]
				nstest.Eventually(t, 20*time.Second, func() string {
					if err := exec.Command("ip", "netns", "exec", from.ns.Name, "ping", "-c", "1", "-W", "1", to.pod).Run(); err != nil {
						return from.name + "'s host cannot ping " + to.name + "'s pod " + to.pod + " under all.rp_filter=" + all + ": " + err.Error()
					}
					out, err := exec.Command("ip", "-n", from.ns.Name, "-4", "-o", "addr", "show", "dev", "wg.routed").CombinedOutput()
					if err != nil || !strings.Contains(string(out), "inet "+own[from.name]+"/32") {
						return from.name + "'s wg.routed does not carry " + own[from.name] + ": " + string(out)
					}
					out, err = exec.Command("ip", "-n", from.ns.Name, "route", "get", to.pod).CombinedOutput()
					if err != nil || !strings.Contains(string(out), "dev wg.routed") || !strings.Contains(string(out), "src "+own[from.name]) {
						return from.name + "'s route to " + to.pod + " is not through wg.routed from " + own[from.name] + ": " + string(out)
					}
					if !slices.Contains(allowedIPs(t, to, from.name), own[from.name]+"/32") {
						return to.name + "'s peer " + from.name + " does not allow " + own[from.name]
					}
					return ""
				})
			}
			// Steady: several in a row, none lost, and neither the
			// requests nor the pod's replies (which echo the pattern)
			// in clear on the uplink: the replies go to node-b's device
			// address, which node-a routes through its device.
			stop := capture(t, a, "192.0.2.2")
			const pattern = "5eedc0de0a11fa11"
			if out, err := exec.Command("ip", "netns", "exec", b.ns.Name, "ping", "-c", "5", "-i", "0.2", "-W", "1", "-p", pattern, a.pod).CombinedOutput(); err != nil {
				t.Fatalf("node-b's host to node-a's pod: %v\n%s", err, out)
			}
			raw, _ := hex.DecodeString(pattern)
			if bytes.Contains(stop(), raw) {
				t.Error("node-b's host's pings to node-a's pod (or the replies) are in clear on the uplink")
			}
			// node-b's address moves (a new allocation): the device
			// carries only the new one, the routes take it as their
			// source again (the kernel dropped those with the old one
			// when it went), and the host still reaches the pod.
			l.mu.Lock()
			l.wgAddrs["node-b"] = "10.244.1.2"
			l.mu.Unlock()
			l.feedNodes()
			nstest.Eventually(t, 20*time.Second, func() string {
				out, _ := exec.Command("ip", "-n", b.ns.Name, "-4", "-o", "addr", "show", "dev", "wg.routed").CombinedOutput()
				if strings.Count(string(out), "inet ") != 1 || !strings.Contains(string(out), "inet 10.244.1.2/32") {
					return "node-b's wg.routed carries " + string(out) + ", want 10.244.1.2/32 alone"
				}
				out, _ = exec.Command("ip", "-n", b.ns.Name, "route", "get", a.pod).CombinedOutput()
				if !strings.Contains(string(out), "dev wg.routed") || !strings.Contains(string(out), "src 10.244.1.2") {
					return "node-b's route to node-a's pod: " + string(out)
				}
				if err := exec.Command("ip", "netns", "exec", b.ns.Name, "ping", "-c", "1", "-W", "1", a.pod).Run(); err != nil {
					return "node-b's host cannot ping node-a's pod from its new address: " + err.Error()
				}
				return ""
			})
			for _, n := range []*wgNode{a, b} {
				if c := warnings(n, "net.ipv4.conf.all.rp_filter is not 0"); c != 0 {
					t.Errorf("%s warned about all.rp_filter %d times with every node's device addressed", n.name, c)
				}
			}
		})
	}
}

// allowedIPs are the allowed IPs of n's peer node on its IPv4 device.
func allowedIPs(t *testing.T, n *wgNode, peer string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.f.Wireguard(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range st.Devices {
		for _, p := range d.Peers {
			if d.Name == "wg.routed" && p.Node == peer {
				return p.AllowedIPs
			}
		}
	}
	return nil
}

// TestWireguardDeviceAddressIPv6: with IPv6 WireGuard, an IPv6 pool
// whose blocks are node-a's and node-b's and their Nodes' IPv6 device
// addresses from them, each wg-v6.routed carries its node's address
// (/128), the route to the other node's block goes through it from
// that address, and each node's host pings the other's device address
// through the devices (the reply comes back to the sender's device
// address, which the other node routes through its device too).
func TestWireguardDeviceAddressIPv6(t *testing.T) {
	l := newWGLab(t, func(_ string, c *felix.Config) { c.WireGuard.EnabledV6 = true })
	l.setAddr6()
	own := map[string]string{"node-a": "fd00:244::1", "node-b": "fd00:244::1:1"}
	l.mu.Lock()
	l.wgAddrs6 = own
	l.mu.Unlock()
	for _, n := range l.nodes {
		n.f.SetResource(pool("p6", "fd00:244::/48", "Never", false))
		n.f.ReplaceAffinities([]felix.BlockAffinity{
			{Node: "node-a", CIDR: pfx("10.244.0.0/26"), State: felix.AffinityConfirmed},
			{Node: "node-b", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
			{Node: "node-a", CIDR: pfx("fd00:244::/122"), State: felix.AffinityConfirmed},
			{Node: "node-b", CIDR: pfx("fd00:244::1:0/122"), State: felix.AffinityConfirmed},
		})
	}
	l.feedNodes()
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	for _, pair := range [][2]*wgNode{{b, a}, {a, b}} {
		from, to := pair[0], pair[1]
		nstest.Eventually(t, 30*time.Second, func() string {
			if err := exec.Command("ip", "netns", "exec", from.ns.Name, "ping", "-6", "-c", "1", "-W", "1", own[to.name]).Run(); err != nil {
				return from.name + "'s host cannot ping " + to.name + "'s device address " + own[to.name] + ": " + err.Error()
			}
			out, err := exec.Command("ip", "-n", from.ns.Name, "-6", "-o", "addr", "show", "dev", "wg-v6.routed").CombinedOutput()
			if err != nil || !strings.Contains(string(out), "inet6 "+own[from.name]+"/128") {
				return from.name + "'s wg-v6.routed does not carry " + own[from.name] + ": " + string(out)
			}
			out, err = exec.Command("ip", "-n", from.ns.Name, "-6", "route", "get", own[to.name]).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "dev wg-v6.routed") || !strings.Contains(string(out), "src "+own[from.name]) {
				return from.name + "'s route to " + own[to.name] + " is not through wg-v6.routed from " + own[from.name] + ": " + string(out)
			}
			return ""
		})
	}
}
