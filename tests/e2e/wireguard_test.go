package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// The payload the probes carry ("ROUTEDSECRET"), in hex for ping -p.
const (
	wgSecret    = "ROUTEDSECRET"
	wgSecretHex = "524f55544544534543524554"
)

// uplinkCapture runs tcpdump on every interface of the lab's router
// namespace (every node's uplink and both subnets' bridges) until the
// returned stop is called, which returns the capture file once it holds
// everything sent before stop.
func uplinkCapture(t *testing.T, l *lab.Lab) (stop func() string) {
	t.Helper()
	if _, err := exec.LookPath("tcpdump"); err != nil {
		t.Fatal("tcpdump not found; run tests/ensure-deps.sh (make deps)")
	}
	file := filepath.Join(t.TempDir(), "router.pcap")
	cmd := exec.Command("ip", "netns", "exec", l.Topo.RouterNS(), "tcpdump", "-i", "any", "--immediate-mode", "-U", "-n", "-w", file)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// tcpdump listens a moment before it sees packets, and lags on a
	// loaded machine, dropping what it has not written when interrupted:
	// a marker (a ping from the first node to its router, never through
	// WireGuard) seen in the file says it has caught up.
	node := l.Topo.Nodes[0].Name
	out, _ := exec.Command("ip", "-n", node, "route", "show", "default").Output()
	gw := regexp.MustCompile(`default via (\S+)`).FindStringSubmatch(string(out))
	if gw == nil {
		t.Fatalf("%s has no default route", node)
	}
	caughtUp := func(what string) {
		mark := fmt.Sprintf("%016x", uint64(time.Now().UnixNano()))
		raw, _ := hex.DecodeString(mark)
		testenv.Eventually(t, 15*time.Second, 0, func() string {
			_ = exec.Command("ip", "netns", "exec", node, "ping", "-n", "-c", "1", "-W", "0.2", "-p", mark, gw[1]).Run()
			if b, _ := os.ReadFile(file); !bytes.Contains(b, raw) {
				return what
			}
			return ""
		})
	}
	caughtUp("tcpdump has captured nothing yet")
	return func() string {
		caughtUp("the capture has not caught up with the traffic yet")
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		return file
	}
}

// pcapCount counts the packets of a capture that match a tcpdump filter.
func pcapCount(t *testing.T, file string, filter ...string) int {
	t.Helper()
	out, err := exec.Command("tcpdump", append([]string{"-nn", "-r", file}, filter...)...).Output()
	if err != nil {
		t.Fatalf("tcpdump -r %s %v: %v", file, filter, err)
	}
	return bytes.Count(out, []byte("\n"))
}

// secretPing pings to from pod with the recognizable payload.
func secretPing(t *testing.T, from lab.Pod, to string, count int) int {
	t.Helper()
	args := []string{"netns", "exec", from.NS, "ping", "-n", "-q", "-c", fmt.Sprint(count), "-i", "0.05", "-W", "1", "-p", wgSecretHex, to}
	out, _ := exec.Command("ip", args...).CombinedOutput()
	m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("ping %s from %s: %s", to, from.Name, out)
	}
	var got int
	fmt.Sscan(string(m[2]), &got)
	return got
}

// tcpSecret sends the payload over TCP from one pod to a busybox nc
// listening in the other, and reports whether it arrived.
func tcpSecret(t *testing.T, from, to lab.Pod, addr string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", to.NS, "busybox", "nc", "-l", "-p", "7777")
	var got bytes.Buffer
	srv.Stdout = &got
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = srv.Wait() }()
	// The listener may not be up yet: retry the connection, 8 s at most.
	testenv.Eventually(t, 8*time.Second, 200*time.Millisecond, func() string {
		c := exec.Command("ip", "netns", "exec", from.NS, "busybox", "nc", "-w", "2", addr, "7777")
		c.Stdin = strings.NewReader(wgSecret + " over tcp\n")
		if err := c.Run(); err != nil {
			return fmt.Sprintf("TCP from %s to %s port 7777: %v", from.Name, addr, err)
		}
		return ""
	})
	_ = srv.Wait()
	return strings.Contains(got.String(), wgSecret)
}

// TestWireguardLab runs the lab with WireGuard on (IPv4 and IPv6,
// userspace: this kernel has no WireGuard module) and checks with real
// routed, real pods and a capture of every node's uplink in the router
// namespace: every pod pair pings over IPv4 and IPv6, TCP connects,
// the capture holds WireGuard's UDP 51820/51821 and never a payload in
// clear text; routedctl node status shows peers with handshakes; a
// deny policy still denies; a key rotation under a ping stream from the
// rotating node loses at most 3 probes (WireGuard's retry would lose
// 4-5); a restarted node keeps its key, loses at most
// 5 probes of a ping every 100 ms across the restart (its userspace
// device dies with routed) and leaks nothing meanwhile. Then
// (wireguard_config_test.go): node status rows, per-peer metrics and
// the pods' MTU; Calico's FelixConfiguration wireguardEnabled /
// wireguardEnabledV6 / wireguardHostEncryptionEnabled, applied with
// routedctl, turn encryption off and on live; with a VXLAN pool, pod
// traffic goes through wg.routed and not vxlan.routed (this kernel has
// no ipip module); a node whose keys reappear is reached through the
// tunnel within keyAppearBound, and is held, never sent to in clear,
// while it has none.
func TestWireguardLab(t *testing.T) {
	t.Setenv("ROUTED_WIREGUARD", "true")
	t.Setenv("ROUTED_WIREGUARD_V6", "true")
	l := startLabWith(t, func(topo *lab.Topology) { *topo = topo.WithDualStack() })
	ctx := context.Background()
	var out strings.Builder
	rep := lab.Check(ctx, l, 1, &out)
	if !rep.OK() {
		t.Log(out.String())
		t.Fatalf("lab check with WireGuard: %s", rep)
	}
	t.Logf("every pair reachable with WireGuard: %s", rep)
	pods := l.Pods()

	stop := uplinkCapture(t, l)
	pairs := 0
	for _, from := range pods {
		for _, to := range pods {
			if from.Node == to.Node {
				continue
			}
			for _, addr := range []string{to.IP, to.IP6} {
				if got := secretPing(t, from, addr, 3); got != 3 {
					t.Errorf("%s -> %s (%s): %d of 3 answered", from.Name, to.Name, addr, got)
				}
				pairs++
			}
		}
	}
	if !tcpSecret(t, pods[0], pods[len(pods)-1], pods[len(pods)-1].IP) {
		t.Error("TCP over IPv4 between pods on different nodes did not deliver the payload")
	}
	if !tcpSecret(t, pods[len(pods)-1], pods[0], pods[0].IP6) {
		t.Error("TCP over IPv6 between pods on different nodes did not deliver the payload")
	}
	file := stop()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(wgSecret)) {
		t.Errorf("a pod payload crossed the uplinks in clear text")
	}
	v4, v6 := pcapCount(t, file, "udp", "port", "51820"), pcapCount(t, file, "udp", "port", "51821")
	clear4 := pcapCount(t, file, "icmp", "and", "net", l.Topo.PoolCIDR)
	t.Logf("capture: %d pod ping pairs (IPv4 and IPv6) and 2 TCP streams; %d packets on UDP 51820, %d on UDP 51821, %d pod ICMP packets in clear", pairs, v4, v6, clear4)
	if v4 < pairs || v6 < pairs || clear4 != 0 {
		t.Errorf("want WireGuard packets on both ports (at least %d each) and no pod ICMP in clear", pairs)
	}

	n1 := l.Topo.Nodes[0].Name
	st, err := l.NodeCtl(ctx, n1, "node", "status")
	if err != nil || !strings.Contains(st, "device wg.routed (userspace)") || !strings.Contains(st, "device wg-v6.routed (userspace)") {
		t.Errorf("node status on %s does not show both devices: %v\n%s", n1, err, st)
	}
	t.Logf("routedctl node status on %s:\n%s", n1, st)
	key := func(node string) string {
		// Exit code 2 (a BGP session not up yet, after a restart) still
		// prints the WireGuard part.
		s, err := l.NodeCtl(ctx, node, "node", "status")
		m := regexp.MustCompile(`device wg\.routed \(\w+\), public key (\S+),`).FindStringSubmatch(s)
		if m == nil {
			t.Fatalf("no wg.routed key in node status of %s (%v):\n%s", node, err, s)
		}
		return m[1]
	}

	// A deny policy still denies: policy applies at the pod's interface,
	// before and after the tunnel.
	a, b := pods[0], pods[len(pods)-1]
	if err := l.ApplyYAML(ctx, "deny.yaml", denyYAML(a.IP, b.IP)); err != nil {
		t.Fatal(err)
	}
	waitVerdict(t, l, a, b.IP, false, "deny with WireGuard")
	if got := pings(t, l, b, a.IP, 3); got != 3 {
		t.Errorf("the reverse flow %s -> %s is not denied but got %d of 3", b.Name, a.Name, got)
	}
	if _, err := l.Ctl(ctx, "delete", "globalnetworkpolicy", "e2e-deny"); err != nil {
		t.Fatal(err)
	}
	waitVerdict(t, l, a, b.IP, true, "deny deleted")

	// Key rotation on the source's node under a ping stream every 50 ms
	// from it: the source's own handshake under its new key reaches dst
	// before dst has the key from etcd and is dropped, and WireGuard
	// would retry only 5 s later; dst greets the source as it learns
	// the key. Nothing else sends from dst meanwhile (no rescue from
	// the other side).
	src, dst := a, b
	before := key(src.Node)
	// A second's worth of probes on each side of the rotation.
	stream := l.StartPings(src, dst.IP, 50*time.Millisecond)
	waitProbes(t, stream, 20)
	if s, err := l.NodeCtl(ctx, src.Node, "node", "wireguard-rotate-key"); err != nil {
		t.Fatalf("rotate: %v: %s", err, s)
	}
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		if key(src.Node) == before {
			return "the key did not change yet"
		}
		return ""
	})
	waitProbes(t, stream, 20)
	r := stream.Stop()
	after := key(src.Node)
	t.Logf("key rotation on %s (%s -> %s) under a ping every 50 ms: %s", src.Node, before, after, r)
	if after == before {
		t.Errorf("the key did not change")
	}
	// A lost probe waits out its 1-s deadline: three lost are up to 3 s
	// without traffic (WireGuard's own retry loses 4-5).
	if r.Lost() > 3 {
		t.Errorf("key rotation lost %d probes (more than 3, up to 3 s without traffic)", r.Lost())
	}

	// A restarted node keeps its key, and traffic flows again.
	// The userspace device dies with routed: traffic to and from the
	// node's pods is held (the pool's blackhole) until the new routed
	// has its device; the loss is measured, and nothing may leak.
	k := key(dst.Node)
	stop = uplinkCapture(t, l)
	sctx, stopLeak := context.WithCancel(ctx)
	stream = l.StartPings(src, dst.IP, 100*time.Millisecond)
	leak := make(chan int, 1)
	go func() { // the payload, sent all along the restart
		n := 0
		for sctx.Err() == nil {
			n += secretPing(t, src, dst.IP, 2)
		}
		leak <- n
	}()
	t0 := time.Now()
	l.StopNode(dst.Node, false)
	stopped := time.Since(t0)
	if err := l.StartNode(ctx, dst.Node); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitNodeReady(ctx, dst.Node, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(t0)
	reach(t, l, src, dst.IP)
	took := time.Since(t0)
	t.Logf("restart: routed stopped after %v, ready again after %v", stopped.Round(time.Millisecond), ready.Round(time.Millisecond))
	waitProbes(t, stream, 10)
	r = stream.Stop()
	stopLeak()
	<-leak
	file = stop()
	if raw, err := os.ReadFile(file); err != nil || bytes.Contains(raw, []byte(wgSecret)) {
		t.Errorf("a pod payload crossed the uplinks in clear text across the restart (%v)", err)
	}
	t.Logf("restart of routed on %s (userspace WireGuard): reachable again after %v; ping every 100 ms: %s", dst.Node, took.Round(time.Millisecond), r)
	if r.Lost() > 5 {
		t.Errorf("the restart lost %d probes (more than 5): the new device should greet its peers at once", r.Lost())
	}
	if k2 := key(dst.Node); k2 != k {
		t.Errorf("restart of %s changed its key %s -> %s", dst.Node, k, k2)
	}
	reach(t, l, src, dst.IP6)

	wireguardMetricsAndMTU(t, l, src, dst)
	wireguardOffOnByConfig(t, l, src, dst)
	wireguardReplacesVXLAN(t, l, src, dst)
	wireguardKeyAppears(t, l, src, dst)
	wireguardHostByConfig(t, l, src, dst)
}
