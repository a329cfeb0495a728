package felix_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
)

// TestWireguardHostEncryptionStrictRPFilter: with strict reverse-path
// filtering (rp_filter 1, as some distributions ship) on an encrypting
// node, host encryption still works: node-b's address routes through
// wg.routed on node-a, yet the WireGuard UDP from node-b, and the clear
// host traffic of a node-b that does not encrypt host traffic, arrive
// on eth0 and must pass the check (felix marks them: routed-wireguard
// table). Strict filtering on a node WITHOUT host encryption drops
// what an encrypting peer sends it through the tunnel: every node must
// run with the same setting (docs/wireguard.md), so the mixed case has
// it on node-a only.
func TestWireguardHostEncryptionStrictRPFilter(t *testing.T) {
	skipShortRace(t)
	for _, bHost := range []bool{true, false} {
		t.Run(fmt.Sprintf("node-b host encryption %v", bHost), func(t *testing.T) {
			l := newWGLab(t, func(node string, c *felix.Config) {
				c.WireGuard.HostEncryption = node == "node-a" || bHost
			})
			a, b := l.nodes["node-a"], l.nodes["node-b"]
			for _, n := range []*wgNode{a, b} {
				if n == a || bHost {
					run(t, "ip", "netns", "exec", n.ns.Name, "sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.eth0.rp_filter=1")
				}
			}
			srv := listenHost(t, b, 7779)
			waitHostEncrypted(t, a, "node-b", true)
			if bHost {
				waitHostEncrypted(t, b, "node-a", true)
			}
			l.waitPing(a, b.pod, 20*time.Second)
			stop := capture(t, a, "192.0.2.2")
			hostTalk(t, a, srv, "192.0.2.2:7779")
			sent, got := l.ping(a, b.pod, 5, "0.05", "1", secretHex)
			pcap := stop()
			if got != sent {
				t.Errorf("pod pings under strict rp_filter: %d of %d answered", got, sent)
			}
			if bytes.Contains(pcap, []byte(hostSecret+hostSecret)) && bHost {
				t.Error("host payload in clear with host encryption on both nodes")
			}
			if v := a.ns.ReadSysctl(t, "net/ipv4/conf/all/src_valid_mark"); v != "1\n" {
				t.Errorf("node-a's src_valid_mark %q, want 1", v)
			}
			if out := run(t, "ip", "netns", "exec", a.ns.Name, "nft", "list", "table", "inet", "routed-wireguard"); !bytes.Contains([]byte(out), []byte("meta mark set meta mark | 0x00100000")) {
				t.Errorf("node-a's routed-wireguard table:\n%s", out)
			}
		})
	}
}
