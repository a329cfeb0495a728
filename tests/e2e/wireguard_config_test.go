package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// keyAppearBound is how soon pod traffic to a node flows through
// wg.routed again after the node's WireGuard keys reappear (a
// FelixConfiguration override removed), for one node or for every node
// at once (docs/wireguard.md). A handshake initiation sent before the
// peer has read this node's key is dropped and retried by WireGuard
// 5 s later; the bound leaves room for one retry on a loaded machine.
const keyAppearBound = 10 * time.Second

// waitProbes waits until n more probes of a ping stream have finished.
func waitProbes(t *testing.T, p *lab.Pings, n int) {
	t.Helper()
	if err := p.WaitDone(p.Done()+n, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// routeDev is the device a node routes addr by (`ip route get`).
func routeDev(t *testing.T, node, addr string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", node, "route", "get", addr).CombinedOutput()
	if m := regexp.MustCompile(` dev (\S+)`).FindSubmatch(out); err == nil && m != nil {
		return string(m[1])
	}
	return fmt.Sprintf("none (%v: %s)", err, bytes.TrimSpace(out))
}

// waitRouteDev waits until node routes addr by dev.
func waitRouteDev(t *testing.T, node, addr, dev, what string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if got := routeDev(t, node, addr); got != dev {
			return fmt.Sprintf("%s: %s routes %s by %s, want %s", what, node, addr, got, dev)
		}
		return ""
	})
}

// waitStatus waits until `routedctl node status` on node says (or, with
// has false, no longer says) want.
func waitStatus(t *testing.T, l *lab.Lab, node, want string, has bool) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		st, _ := l.NodeCtl(context.Background(), node, "node", "status")
		if strings.Contains(st, want) != has {
			return fmt.Sprintf("node status on %s: %q present=%v, want %v:\n%s", node, want, !has, has, st)
		}
		return ""
	})
}

// txPackets reads a device's sent-packet counter on a node.
func txPackets(t *testing.T, l *lab.Lab, node, dev string) uint64 {
	t.Helper()
	n, err := l.TunnelTxPackets(context.Background(), node, dev)
	if err != nil {
		t.Fatalf("%s on %s: %v", dev, node, err)
	}
	return n
}

// capturedSecret reports whether a capture holds the probes' payload.
func capturedSecret(t *testing.T, file string) bool {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(raw, []byte(wgSecret))
}

// nodeAddr is a lab node's IPv4 address.
func nodeAddr(t *testing.T, l *lab.Lab, node string) string {
	t.Helper()
	for _, n := range l.Topo.Nodes {
		if n.Name == node {
			return n.Addr.Addr().String()
		}
	}
	t.Fatalf("no node %s", node)
	return ""
}

// hostSecretPing pings from a node's host to another address with the
// probes' payload and returns how many came back.
func hostSecretPing(t *testing.T, node, to string, count int) int {
	t.Helper()
	return secretPing(t, lab.Pod{Name: node + " (host)", NS: node}, to, count)
}

// wireguardMetricsAndMTU: on real routed, `routedctl node status` and
// the per-peer metrics show handshakes and bytes both ways, and a
// pod's MTU is the uplink's less IPv6 WireGuard's 80 (both families
// on: the smallest wins).
func wireguardMetricsAndMTU(t *testing.T, l *lab.Lab, src, dst lab.Pod) {
	t.Helper()
	st, _ := l.NodeCtl(context.Background(), src.Node, "node", "status")
	// | PEER | ENDPOINT | ALLOWED IPS | LATEST HANDSHAKE | RX BYTES | TX BYTES |
	row := regexp.MustCompile(`\|\s*` + regexp.QuoteMeta(dst.Node) + `\s*\|[^|]+\|[^|]+\|\s*\d+[smh]\S*\s*\|\s*[1-9]\d*\s*\|\s*[1-9]\d*\s*\|`)
	if n := len(row.FindAllString(st, -1)); n != 2 {
		t.Errorf("node status on %s: %d peer rows for %s with a handshake and bytes both ways, want 2 (wg.routed, wg-v6.routed):\n%s", src.Node, n, dst.Node, st)
	}
	m, err := l.NodeMetrics(context.Background(), src.Node)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"routed_wireguard_peer_received_bytes", "routed_wireguard_peer_sent_bytes", "routed_wireguard_peer_latest_handshake_seconds"} {
		re := regexp.MustCompile(name + `\{device="wg\.routed",peer="` + regexp.QuoteMeta(dst.Node) + `"\} ([0-9.e+]+)`)
		v := re.FindStringSubmatch(m)
		if v == nil || v[1] == "0" {
			t.Errorf("metrics of %s: %s for peer %s missing or 0 (%v)", src.Node, name, dst.Node, v)
		}
	}
	up := routeDev(t, src.Node, nodeAddr(t, l, dst.Node))
	host := mtuOf(t, src.Node, up)
	if pod := mtuOf(t, src.NS, "eth0"); pod != host-80 {
		t.Errorf("pod %s MTU %d, want %d (uplink %s %d less IPv6 WireGuard's 80)", src.Name, pod, host-80, up, host)
	} else {
		t.Logf("pod MTU %d, uplink %s %d", pod, up, host)
	}
}

// mtuOf is a link's MTU in a namespace.
func mtuOf(t *testing.T, ns, link string) int {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns, "-o", "link", "show", link).CombinedOutput()
	var mtu int
	if m := regexp.MustCompile(` mtu (\d+)`).FindSubmatch(out); err == nil && m != nil {
		fmt.Sscan(string(m[1]), &mtu)
		return mtu
	}
	t.Fatalf("ip -n %s link show %s: %v: %s", ns, link, err, out)
	return 0
}

// wireguardOffOnByConfig: Calico's FelixConfiguration wireguardEnabled
// and wireguardEnabledV6, applied with routedctl, turn encryption off
// live on every node (pod payloads then cross the uplinks in clear:
// the capture's negative control); removed, every node makes its
// devices and publishes its keys again, and pod traffic goes through
// wg.routed within keyAppearBound.
func wireguardOffOnByConfig(t *testing.T, l *lab.Lab, src, dst lab.Pod) {
	ctx := context.Background()
	if err := l.ApplyYAML(ctx, "wg-off.yaml", `apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {wireguardEnabled: false, wireguardEnabledV6: false}
`); err != nil {
		t.Fatal(err)
	}
	up := routeDev(t, src.Node, nodeAddr(t, l, dst.Node))
	waitRouteDev(t, src.Node, dst.IP, up, "wireguardEnabled: false")
	waitStatus(t, l, dst.Node, "device wg.routed", false)
	waitStatus(t, l, dst.Node, "device wg-v6.routed", false)
	reach(t, l, src, dst.IP)
	stop := uplinkCapture(t, l)
	secretPing(t, src, dst.IP, 3)
	if file := stop(); !capturedSecret(t, file) {
		t.Errorf("WireGuard off by FelixConfiguration: the payload should cross the uplinks in clear: the capture checks are blind")
	}

	// Removed: the flags (on) apply again, every node publishes its keys.
	t0 := time.Now()
	if _, err := l.Ctl(ctx, "delete", "felixconfiguration", "default"); err != nil {
		t.Fatal(err)
	}
	var routed time.Duration
	testenv.Eventually(t, keyAppearBound, 0, func() string {
		if dev := routeDev(t, src.Node, dst.IP); dev != "wg.routed" {
			return fmt.Sprintf("%s routes %s by %s after the keys reappeared", src.Node, dst.IP, dev)
		}
		if routed == 0 {
			routed = time.Since(t0)
		}
		if got, err := l.Ping(ctx, src, dst.IP, 1); err != nil || got != 1 {
			return fmt.Sprintf("%s cannot reach %s through wg.routed (%v)", src.Name, dst.IP, err)
		}
		return ""
	})
	t.Logf("wireguardEnabled removed on every node: %s routes %s through wg.routed after %v, reaches it after %v",
		src.Node, dst.IP, routed.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	reach(t, l, src, dst.IP6)
	stop = uplinkCapture(t, l)
	got := secretPing(t, src, dst.IP, 3) + secretPing(t, src, dst.IP6, 3)
	if file := stop(); got != 6 || capturedSecret(t, file) {
		t.Errorf("WireGuard on again: %d of 6 answered, payload in clear %v", got, capturedSecret(t, file))
	}
}

// wireguardReplacesVXLAN: with the pool's VXLAN on, pod traffic
// between nodes goes through wg.routed, never vxlan.routed (IPIP cannot
// be run here: this kernel has no ipip module). The negative control:
// with WireGuard off on the source's node (its FelixConfiguration
// node.<name>), its pod's payload crosses vxlan.routed in clear.
func wireguardReplacesVXLAN(t *testing.T, l *lab.Lab, src, dst lab.Pod) {
	ctx := context.Background()
	const vxlanDev = "vxlan.routed"
	defer func() {
		if err := l.SetPoolEncap(ctx, "Never", "Never"); err != nil {
			t.Error(err)
		}
	}()
	if err := l.SetPoolEncap(ctx, "Never", "Always"); err != nil {
		t.Fatal(err)
	}
	// The pool change reached felix once its VXLAN device is there.
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		if err := exec.Command("ip", "-n", src.Node, "link", "show", vxlanDev).Run(); err != nil {
			return fmt.Sprintf("no %s on %s with VXLAN on", vxlanDev, src.Node)
		}
		return ""
	})
	if dev := routeDev(t, src.Node, dst.IP); dev != "wg.routed" {
		t.Errorf("VXLAN pool: %s routes %s by %s, want wg.routed", src.Node, dst.IP, dev)
	}
	tx := txPackets(t, l, src.Node, vxlanDev)
	stop := uplinkCapture(t, l)
	if got := secretPing(t, src, dst.IP, 5); got != 5 {
		t.Errorf("VXLAN pool with WireGuard: %d of 5 answered", got)
	}
	file := stop()
	if capturedSecret(t, file) || txPackets(t, l, src.Node, vxlanDev) != tx {
		t.Errorf("VXLAN pool with WireGuard: payload in clear %v, %s sent %d", capturedSecret(t, file), vxlanDev, txPackets(t, l, src.Node, vxlanDev)-tx)
	}

	name := "node." + src.Node
	if err := l.ApplyYAML(ctx, "wg-src-off.yaml", fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: %s}
spec: {wireguardEnabled: false}
`, name)); err != nil {
		t.Fatal(err)
	}
	waitRouteDev(t, src.Node, dst.IP, vxlanDev, "wireguardEnabled: false on "+src.Node)
	tx = txPackets(t, l, src.Node, vxlanDev)
	stop = uplinkCapture(t, l)
	secretPing(t, src, dst.IP, 3) // dst holds its replies: src has no key
	if file := stop(); !capturedSecret(t, file) || txPackets(t, l, src.Node, vxlanDev) == tx {
		t.Errorf("WireGuard off on %s with VXLAN: the payload should cross %s in clear (seen %v, sent %d): the checks above are blind",
			src.Node, vxlanDev, capturedSecret(t, file), txPackets(t, l, src.Node, vxlanDev)-tx)
	}
	if _, err := l.Ctl(ctx, "delete", "felixconfiguration", name); err != nil {
		t.Fatal(err)
	}
	waitRouteDev(t, src.Node, dst.IP, "wg.routed", "wireguardEnabled removed on "+src.Node)
	reach(t, l, src, dst.IP)
}

// wireguardKeyAppears: a node whose keys are withdrawn (its
// FelixConfiguration node.<name> turns WireGuard off there) is held by
// the others, nothing sent in clear; once its keys reappear, the
// others' pods reach it through the tunnel within keyAppearBound.
func wireguardKeyAppears(t *testing.T, l *lab.Lab, src, dst lab.Pod) {
	ctx := context.Background()
	name := "node." + dst.Node
	if err := l.ApplyYAML(ctx, "wg-node-off.yaml", fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: %s}
spec: {wireguardEnabled: false, wireguardEnabledV6: false}
`, name)); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, l, src.Node, "HELD: pod traffic to "+dst.Node+" (wg.routed)", true)
	waitStatus(t, l, src.Node, "HELD: pod traffic to "+dst.Node+" (wg-v6.routed)", true)
	stop := uplinkCapture(t, l)
	got := secretPing(t, src, dst.IP, 3) + secretPing(t, src, dst.IP6, 3)
	if file := stop(); got != 0 || capturedSecret(t, file) {
		t.Errorf("a node without keys: %d of 6 answered, payload in clear %v; want held", got, capturedSecret(t, file))
	}
	t0 := time.Now()
	if _, err := l.Ctl(ctx, "delete", "felixconfiguration", name); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{dst.IP, dst.IP6} {
		testenv.Eventually(t, keyAppearBound-time.Since(t0), 0, func() string {
			if got, err := l.Ping(ctx, src, to, 1); err != nil || got != 1 {
				return fmt.Sprintf("%s cannot reach %s (%v) after %s's keys reappeared", src.Name, to, err, dst.Node)
			}
			return ""
		})
		t.Logf("%s's keys reappeared: %s reaches %s after %v", dst.Node, src.Name, to, time.Since(t0).Round(time.Millisecond))
	}
	stop = uplinkCapture(t, l)
	got = secretPing(t, src, dst.IP, 3) + secretPing(t, src, dst.IP6, 3)
	if file := stop(); got != 6 || capturedSecret(t, file) {
		t.Errorf("after the keys reappeared: %d of 6 answered, payload in clear %v", got, capturedSecret(t, file))
	}
}

// wireguardHostByConfig: FelixConfiguration wireguardHostEncryptionEnabled,
// applied with routedctl, encrypts host-to-host traffic live; removed,
// it is in clear again (the capture's negative control).
func wireguardHostByConfig(t *testing.T, l *lab.Lab, src, dst lab.Pod) {
	ctx := context.Background()
	if err := l.ApplyYAML(ctx, "wg-host.yaml", `apiVersion: projectcalico.org/v3
kind: FelixConfiguration
metadata: {name: default}
spec: {wireguardHostEncryptionEnabled: true}
`); err != nil {
		t.Fatal(err)
	}
	to := nodeAddr(t, l, dst.Node)
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		for _, n := range []string{src.Node, dst.Node} {
			st, _ := l.NodeCtl(ctx, n, "node", "status")
			other := dst.Node
			if n == dst.Node {
				other = src.Node
			}
			if !regexp.MustCompile(`Host traffic encrypted to: .*\b` + regexp.QuoteMeta(other) + `\b`).MatchString(st) {
				return fmt.Sprintf("%s does not encrypt host traffic to %s yet:\n%s", n, other, st)
			}
		}
		return ""
	})
	stop := uplinkCapture(t, l)
	got := hostSecretPing(t, src.Node, to, 3)
	if file := stop(); got != 3 || capturedSecret(t, file) {
		t.Errorf("host encryption by FelixConfiguration: %d of 3 host pings answered, payload in clear %v", got, capturedSecret(t, file))
	}
	if _, err := l.Ctl(ctx, "delete", "felixconfiguration", "default"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, l, src.Node, "Host encryption: off", true)
	stop = uplinkCapture(t, l)
	got = hostSecretPing(t, src.Node, to, 3)
	if file := stop(); got != 3 || !capturedSecret(t, file) {
		t.Errorf("host encryption removed: %d of 3 host pings answered, payload in clear %v (want in clear: else the check above is blind)", got, capturedSecret(t, file))
	}
}
