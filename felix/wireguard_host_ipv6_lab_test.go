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
		waitHostEncryptedV6(t, n, peer, want)
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

// waitHostEncryptedV6 waits until n's status says host traffic to peer
// through wg-v6.routed is encrypted (want) or in clear.
func waitHostEncryptedV6(t *testing.T, n *wgNode, peer string, want bool) {
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

// TestWireguardHostEncryptionIPv6NeighbourFlush: the IPv6 side of
// TestWireguardHostEncryptionStrictRPFilterARP. IPv6 has no rp_filter
// and neighbour discovery makes no reverse-path check (ndisc_recv_ns
// answers a solicitation for one of its addresses on the interface it
// came on, whatever the routes to the sender), so with each node's
// IPv6 address in the other's table 82 (through wg-v6.routed) and the
// IPv6 neighbour tables flushed, IPv6 host traffic both ways comes back
// within seconds, still encrypted, with nothing marked for it (no arp
// table is involved; the inet table marks IPv6 too but IPv6 never
// consults the mark for a source check).
func TestWireguardHostEncryptionIPv6NeighbourFlush(t *testing.T) {
	skipShortRace(t)
	l := newWGLab(t, func(_ string, c *felix.Config) {
		c.WireGuard.EnabledV6 = true
		c.WireGuard.HostEncryption = true
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.setAddr6()
	srvB, srvA := listenOn(t, b, "[fd00:2::2]:7783"), listenOn(t, a, "[fd00:2::1]:7784")
	waitHostEncryptedV6(t, a, "node-b", true)
	waitHostEncryptedV6(t, b, "node-a", true)
	hostTalk(t, a, srvB, "[fd00:2::2]:7783")
	hostTalk(t, b, srvA, "[fd00:2::1]:7784")
	for _, n := range []*wgNode{a, b} {
		run(t, "ip", "-6", "-n", n.ns.Name, "neigh", "flush", "dev", "eth0")
	}
	flushed := time.Now()
	nstest.Eventually(t, 15*time.Second, func() string {
		if err := tryHostTalk(a, "[fd00:2::2]:7783"); err != nil {
			return "node-a's host to node-b's over IPv6: " + err.Error()
		}
		if err := tryHostTalk(b, "[fd00:2::1]:7784"); err != nil {
			return "node-b's host to node-a's over IPv6: " + err.Error()
		}
		return ""
	})
	t.Logf("IPv6 host traffic both ways back %v after the IPv6 neighbour tables were flushed", time.Since(flushed).Round(time.Millisecond))
	for _, s := range []*hostServer{srvA, srvB} {
		drainPeers(s)
	}
	waitHostEncryptedV6(t, a, "node-b", true)
	waitHostEncryptedV6(t, b, "node-a", true)
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srvB, "[fd00:2::2]:7783")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("IPv6 host payload in clear after the neighbour tables were flushed:\n%s", dumpPcap(t, pcap))
	}
}
