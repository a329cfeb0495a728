package felix_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
)

// TestWireguardHostEncryptionIPv6: with IPv6 WireGuard and host
// encryption, host-to-host TCP between the nodes' IPv6 addresses goes
// through wg-v6.routed (rule and table 82 in the IPv6 family, source
// the node's IPv6 address): answered, only UDP 51821 on the uplink,
// never the payload; off, the payload is in clear.
func TestWireguardHostEncryptionIPv6(t *testing.T) {
	l := newWGLab(t, func(_ string, c *felix.Config) {
		c.WireGuard.EnabledV6 = true
		c.WireGuard.HostEncryption = true
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.setAddr6()
	encrypted := func(n *wgNode, peer string, want bool) {
		t.Helper()
		nstest.Eventually(t, 30*time.Second, func() string {
			st, err := n.f.Wireguard(context.Background())
			if err != nil {
				return err.Error()
			}
			for _, h := range st.HostPeers {
				if h.Node == peer && h.Device == wireguard.DeviceV6 && h.Encrypted == want {
					return ""
				}
			}
			return fmt.Sprintf("%s: host peers %+v, want %s on %s encrypted=%v", n.name, st.HostPeers, peer, wireguard.DeviceV6, want)
		})
	}
	encrypted(a, "node-b", true)
	encrypted(b, "node-a", true)
	if r := run(t, "ip", "-6", "-n", a.ns.Name, "rule", "show", "table", "82"); !strings.Contains(r, "not from all fwmark 0x100000/0x100000 lookup 82 proto 82") {
		t.Errorf("node-a's IPv6 rule: %q", r)
	}
	if r := run(t, "ip", "-6", "-n", a.ns.Name, "route", "show", "table", "82"); !strings.Contains(r, "fd00:2::2 dev "+wireguard.DeviceV6) || !strings.Contains(r, "src fd00:2::1") {
		t.Errorf("node-a's IPv6 table 82: %q, want fd00:2::2 dev %s ... src fd00:2::1", r, wireguard.DeviceV6)
	}
	srv := listenOn(t, b, "[fd00:2::2]:7781")
	stop := capture(t, a, "192.0.2.2")
	from := hostTalk(t, a, srv, "[fd00:2::2]:7781")
	pcap := stop()
	if from != "fd00:2::1" {
		t.Errorf("node-b saw the connection from %s, want fd00:2::1", from)
	}
	if bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("IPv6 host payload in clear with host encryption on:\n%s", dumpPcap(t, pcap))
	}
	if n := udpPackets(t, pcap, wireguard.PortV6); n < 5 {
		t.Errorf("%d packets on UDP %d, want the host traffic there", n, wireguard.PortV6)
	}

	setHostEncryption(false, a, b)
	nstest.Eventually(t, 10*time.Second, func() string {
		if r := run(t, "ip", "-6", "-n", a.ns.Name, "rule", "show", "table", "82"); strings.TrimSpace(r) != "" {
			return "IPv6 rule still there: " + r
		}
		return ""
	})
	stop = capture(t, a, "192.0.2.2")
	hostTalk(t, a, srv, "[fd00:2::2]:7781")
	if pcap := stop(); !bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host encryption off: the IPv6 host payload should be in clear; the capture is blind:\n%s", dumpPcap(t, pcap))
	}
}
