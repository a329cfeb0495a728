package felix_test

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
)

// TestWireguardHostEncryptionPeerWithoutKey: node-a encrypts host
// traffic, node-b runs without WireGuard (no key). Host traffic from
// node-a to node-b is answered, in clear (never held: the control plane
// must bootstrap over it), and node-a's status says why; node-b's pods
// stay held (pod traffic keeps its rule); once node-b turns WireGuard
// on, its host traffic is encrypted both ways.
func TestWireguardHostEncryptionPeerWithoutKey(t *testing.T) {
	l := newWGLab(t, func(node string, c *felix.Config) {
		c.WireGuard.Enabled = node == "node-a"
		c.WireGuard.HostEncryption = true
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.waitRoute(a, b.block, "blackhole")
	srv := listenHost(t, b, 7778)
	st := waitHostEncrypted(t, a, "node-b", false)
	var reason string
	for _, h := range st.HostPeers {
		if h.Node == "node-b" {
			reason = h.Reason
		}
	}
	if !strings.Contains(reason, "no WireGuard key") {
		t.Errorf("status: host traffic to node-b in clear because %q, want the missing key", reason)
	}
	if len(st.Held) != 1 || st.Held[0].Node != "node-b" {
		t.Errorf("status held %+v, want node-b's pod traffic", st.Held)
	}
	reg := prometheus.NewRegistry()
	if err := a.f.Register(reg); err != nil {
		t.Fatal(err)
	}
	if v := gauge(t, reg, "routed_wireguard_host_clear_nodes"); v != 1 {
		t.Errorf("routed_wireguard_host_clear_nodes = %v, want 1 (node-b)", v)
	}
	if r := hostTable(t, a); strings.Contains(r, "192.0.2.2") {
		t.Errorf("table 82 routes the keyless node-b: %q", r)
	}

	pcap, sent, got := hostAndPodTraffic(t, l, a, b, srv, "192.0.2.2:7778")
	if !bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host traffic to the keyless node-b should be in clear on the wire:\n%s", dumpPcap(t, pcap))
	}
	if got != 0 || bytes.Contains(pcap, []byte(secret)) {
		t.Errorf("pod traffic to the keyless node-b: %d of %d answered, payload on the wire %v; want held", got, sent, bytes.Contains(pcap, []byte(secret)))
	}

	// node-b publishes a key: host traffic is encrypted once they shook hands.
	began := time.Now()
	b.f.SetWireguard(true, false)
	waitHostEncryptedBoth(t, a, b)
	t.Logf("node-b's key published: host traffic encrypted both ways %v later (device made, key relayed, handshake seen)", time.Since(began).Round(time.Millisecond))
	l.waitPing(a, b.pod, 20*time.Second)
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srv, "192.0.2.2:7778")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Error("after node-b's key appeared and a handshake: host payload still in clear")
	}
	if c, e := gauge(t, reg, "routed_wireguard_host_clear_nodes"), gauge(t, reg, "routed_wireguard_host_encrypted_nodes"); c != 0 || e != 1 {
		t.Errorf("host clear/encrypted nodes = %v/%v, want 0/1", c, e)
	}
	nstest.Eventually(t, 5*time.Second, func() string {
		st, err := a.f.Wireguard(context.Background())
		if err != nil || len(st.Held) != 0 {
			return "node-b still held"
		}
		return ""
	})
}

// gauge is the value of the one sample of a gauge (-1: none).
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// TestWireguardHostEncryptionDeviceUnavailable: asked for the kernel's
// WireGuard on a kernel without it, node-a has no device: its pod
// traffic is held, but its host traffic is not (it goes in clear, the
// status says why) and no rule is written.
func TestWireguardHostEncryptionDeviceUnavailable(t *testing.T) {
	nstest.RequireRoot(t)
	if exec.Command("unshare", "-n", "ip", "link", "add", "wgprobe0", "type", "wireguard").Run() == nil {
		t.Skip("this kernel has WireGuard: the test is for one without (the VM tier has it)")
	}
	l := newWGLab(t, func(node string, c *felix.Config) {
		c.WireGuard.HostEncryption = true
		if node == "node-a" {
			c.WireGuard.Mode = wireguard.ModeKernel
		}
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.waitRoute(a, b.block, "blackhole")
	st := waitHostEncrypted(t, a, "node-b", false)
	if len(st.HostPeers) != 1 || !strings.Contains(st.HostPeers[0].Reason, "not ready") {
		t.Errorf("status: host peers %+v, want node-b in clear because the device is not ready", st.HostPeers)
	}
	srv := listenHost(t, b, 7783)
	hostTalk(t, a, srv, "192.0.2.2:7783")
	if r := hostRule(t, a); strings.TrimSpace(r) != "" {
		t.Errorf("a rule without a device: %q", r)
	}
}
