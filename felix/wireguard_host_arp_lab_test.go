package felix_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
)

// setConf writes net.ipv4.conf.<dev>.<key>=v for each dev in the
// namespace at path (before felix starts, from newWGLab's mutate).
func setConf(t *testing.T, path, key, v string, devs ...string) {
	t.Helper()
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		for _, d := range devs {
			if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", d, key), []byte(v), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("net.ipv4.conf.%v.%s=%s: %v", devs, key, v, err)
	}
}

// waitHostRefused waits until n's status says host traffic to peer
// goes in clear for a reason containing why, and a host warning says
// so too; it returns the status.
func waitHostRefused(t *testing.T, n *wgNode, peer, why string) felix.WireguardStatus {
	t.Helper()
	var st felix.WireguardStatus
	nstest.Eventually(t, 60*time.Second, func() string {
		var err error
		if st, err = n.f.Wireguard(context.Background()); err != nil {
			return err.Error()
		}
		warned := false
		for _, w := range st.HostWarnings {
			warned = warned || (strings.Contains(w, "refused for IPv4") && strings.Contains(w, why))
		}
		for _, h := range st.HostPeers {
			if h.Node == peer && !h.Encrypted && strings.Contains(h.Reason, "host encryption refused") && strings.Contains(h.Reason, why) && warned {
				return ""
			}
		}
		return fmt.Sprintf("%s: host peers %+v, warnings %q, want %s in clear because of %q", n.name, st.HostPeers, st.HostWarnings, peer, why)
	})
	return st
}

// warnings counts n's log entries at warning level whose message
// contains msg.
func warnings(n *wgNode, msg string) int {
	c := 0
	for _, e := range n.logs.AllEntries() {
		if e.Level == logrus.WarnLevel && strings.Contains(e.Message, msg) {
			c++
		}
	}
	return c
}

// recovers flushes both nodes' neighbour tables and waits until each
// node's raw ARP request is answered and host (to the given servers)
// and pod traffic both ways work again.
func recovers(t *testing.T, l *wgLab, a, b *wgNode, toB, toA string) {
	t.Helper()
	for _, n := range []*wgNode{a, b} {
		run(t, "ip", "-n", n.ns.Name, "neigh", "flush", "dev", "eth0")
	}
	flushed := time.Now()
	nstest.Eventually(t, 10*time.Second, func() string {
		if err := arpAnswered(a, "192.0.2.2"); err != nil {
			return err.Error()
		}
		if err := arpAnswered(b, "192.0.2.1"); err != nil {
			return err.Error()
		}
		if err := tryHostTalk(a, toB); err != nil {
			return "node-a's host to node-b's host: " + err.Error()
		}
		if err := tryHostTalk(b, toA); err != nil {
			return "node-b's host to node-a's host: " + err.Error()
		}
		if _, got := l.ping(a, b.pod, 1, "0.2", "1", ""); got != 1 {
			return "node-a's pod cannot ping node-b's pod"
		}
		if _, got := l.ping(b, a.pod, 1, "0.2", "1", ""); got != 1 {
			return "node-b's pod cannot ping node-a's pod"
		}
		return ""
	})
	t.Logf("ARP, host and pod traffic both ways back %v after the neighbour tables were flushed", time.Since(flushed).Round(time.Millisecond))
}

// TestWireguardHostEncryptionARPFilterRefused: with arp_filter=1 (on
// all and the uplink) the kernel checks a peer's ARP request with an
// output route lookup back to the peer that carries no mark, finds
// wg.routed in table 82, and ignores the request: no nftables mark can
// help (the reviewer's lab: B's ARP for A IGNORED with the arp table
// in place). So felix refuses IPv4 host encryption there: the status
// names arp_filter for each peer and in a warning, the clear-nodes
// metric counts the peer, the log warns once, no rule points to table
// 82. After a neighbour flush ARP is answered both ways and host and
// pod traffic recover within 10 s: host traffic in clear (as
// reported), pod traffic still encrypted. With arp_filter back to 0
// host traffic is encrypted again.
func TestWireguardHostEncryptionARPFilterRefused(t *testing.T) {
	skipShortRace(t)
	l := newWGLab(t, func(node string, c *felix.Config) {
		c.WireGuard.HostEncryption = true
		setConf(t, c.NetNSPath, "arp_filter", "1", "all", "eth0")
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	srvB, srvA := listenHost(t, b, 7783), listenHost(t, a, 7784)
	waitHostRefused(t, a, "node-b", "arp_filter=1")
	waitHostRefused(t, b, "node-a", "arp_filter=1")
	l.waitPing(a, b.pod, 20*time.Second)
	for _, n := range []*wgNode{a, b} {
		if r := hostRule(t, n); strings.TrimSpace(r) != "" {
			t.Errorf("%s has a host encryption rule although it is refused:\n%s", n.name, r)
		}
	}
	reg := prometheus.NewRegistry()
	if err := a.f.Register(reg); err != nil {
		t.Fatal(err)
	}
	if c, e := gauge(t, reg, "routed_wireguard_host_clear_nodes"), gauge(t, reg, "routed_wireguard_host_encrypted_nodes"); c != 1 || e != 0 {
		t.Errorf("node-a's host clear/encrypted nodes = %v/%v, want 1/0", c, e)
	}

	recovers(t, l, a, b, "192.0.2.2:7783", "192.0.2.1:7784")
	for _, s := range []*hostServer{srvA, srvB} {
		drainPeers(s)
	}
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srvB, "192.0.2.2:7783")
	sent, got := l.ping(a, b.pod, 3, "0.05", "1", secretHex)
	pcap := stop()
	if got != sent {
		t.Errorf("pod pings with host encryption refused: %d of %d answered", got, sent)
	}
	if !bytes.Contains(pcap, []byte(hostSecret)) {
		t.Error("host payload not seen in clear although host encryption is reported refused")
	}
	if bytes.Contains(pcap, []byte(secret)) {
		t.Errorf("pod payload in clear with host encryption refused:\n%s", dumpPcap(t, pcap))
	}
	for _, n := range []*wgNode{a, b} {
		if c := warnings(n, "host encryption refused for IPv4"); c != 1 {
			t.Errorf("%s warned %d times of the refusal, want once", n.name, c)
		}
	}

	// arp_filter off: encrypted again, the warning gone.
	for _, n := range []*wgNode{a, b} {
		setConf(t, n.ns.Path(), "arp_filter", "0", "all", "eth0")
	}
	waitHostEncryptedBoth(t, a, b)
	if st, err := a.f.Wireguard(context.Background()); err != nil || len(st.HostWarnings) != 0 {
		t.Errorf("node-a's host warnings with arp_filter 0: %q (%v)", st.HostWarnings, err)
	}
	drainPeers(srvB)
	stop = capture(t, a, "192.0.2.2")
	hostTalk(t, a, srvB, "192.0.2.2:7783")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host payload in clear with arp_filter back to 0:\n%s", dumpPcap(t, pcap))
	}
}

// TestWireguardHostEncryptionNoARPFamily: felix's probe of nftables'
// arp family stands for a kernel without CONFIG_NF_TABLES_ARP (this
// one has it). The inet table is written alone, for real, and host
// encryption works while rp_filter is not strict (0 here): host
// traffic encrypted both ways, the status warns that ARP is not
// marked, the log says so once over the test's resyncs (every 5 s
// here), no arp table exists. With rp_filter=1 on all and the
// uplink, the peers' ARP would be ignored, so host encryption is
// refused with that reason (never silently broken): after a neighbour
// flush ARP, host traffic (in clear) and pod traffic recover.
func TestWireguardHostEncryptionNoARPFamily(t *testing.T) {
	skipShortRace(t)
	felix.SetHostARPProbe(func(*nftables.Conn) error { return errors.New("no arp family (test)") })
	t.Cleanup(func() { felix.SetHostARPProbe(nil) })
	l := newWGLab(t, func(node string, c *felix.Config) {
		c.WireGuard.HostEncryption = true
		setConf(t, c.NetNSPath, "rp_filter", "0", "all", "eth0")
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	srvB, srvA := listenHost(t, b, 7785), listenHost(t, a, 7786)
	waitHostEncryptedBoth(t, a, b)
	for _, n := range []*wgNode{a, b} {
		st, err := n.f.Wireguard(context.Background())
		if err != nil || len(st.HostWarnings) != 1 || !strings.Contains(st.HostWarnings[0], "incoming ARP is not marked") ||
			!strings.Contains(st.HostWarnings[0], "no arp family (test)") {
			t.Errorf("%s's host warnings %q (%v), want that ARP is not marked", n.name, st.HostWarnings, err)
		}
		if out, err := exec.Command("ip", "netns", "exec", n.ns.Name, "nft", "list", "table", "arp", wireguard.IncomingTable).CombinedOutput(); err == nil {
			t.Errorf("%s has an arp table although the family is refused:\n%s", n.name, out)
		}
		if out := run(t, "ip", "netns", "exec", n.ns.Name, "nft", "list", "table", "inet", wireguard.IncomingTable); !strings.Contains(out, "meta mark set meta mark | 0x00100000") {
			t.Errorf("%s's inet table:\n%s", n.name, out)
		}
	}
	drainPeers(srvB)
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srvB, "192.0.2.2:7785")
	hostTalk(t, b, srvA, "192.0.2.1:7786")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host payload in clear without the arp family, rp_filter 0:\n%s", dumpPcap(t, pcap))
	}

	// Strict rp_filter: refused, with the reason; traffic keeps working.
	for _, n := range []*wgNode{a, b} {
		setConf(t, n.ns.Path(), "rp_filter", "1", "all", "eth0")
	}
	waitHostRefused(t, a, "node-b", "rp_filter=1")
	waitHostRefused(t, b, "node-a", "rp_filter=1")
	recovers(t, l, a, b, "192.0.2.2:7785", "192.0.2.1:7786")
	for _, n := range []*wgNode{a, b} {
		if c := warnings(n, "incoming ARP is not marked"); c != 1 {
			t.Errorf("%s warned %d times that ARP is not marked, want once", n.name, c)
		}
		if c := warnings(n, "host encryption refused for IPv4"); c != 1 {
			t.Errorf("%s warned %d times of the refusal, want once", n.name, c)
		}
	}
}
