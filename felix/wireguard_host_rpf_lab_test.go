package felix_test

import (
	"bytes"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/wireguard"
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

// TestWireguardHostEncryptionStrictRPFilterARP: with strict reverse-path
// filtering on both nodes and host traffic encrypted both ways, each
// node routes the other's host address through wg.routed (table 82),
// and the kernel checks the sender of every ARP request with that same
// reverse-path lookup (arp_process -> ip_route_input ->
// fib_validate_source), which would find the device instead of the
// uplink the request came on and ignore the request. Once the
// neighbour entries are gone (flushed here; they also age out on their
// own), neither node could resolve the other on the uplink,
// WireGuard's own UDP included, until one node happened to send while
// the other asked (a node learns a neighbour from the neighbour's own
// requests: 20 s in one run without felix's arp table). felix marks
// incoming ARP on the uplinks (table arp routed-wireguard) so the check
// looks past the rule. After the flush, an ARP request each node sends
// itself (raw, so neither table's state can stand in for the answer)
// must be answered, and host and pod traffic both ways must come back,
// within 10 s, still encrypted (well inside the 90 s after which a
// silent peer would go back to clear text, which would hide the bug).
// Without the arp table no request was answered in 10 s.
func TestWireguardHostEncryptionStrictRPFilterARP(t *testing.T) {
	skipShortRace(t)
	l := newWGLab(t, func(node string, c *felix.Config) { c.WireGuard.HostEncryption = true })
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	for _, n := range []*wgNode{a, b} {
		run(t, "ip", "netns", "exec", n.ns.Name, "sysctl", "-q", "-w", "net.ipv4.conf.all.rp_filter=1", "net.ipv4.conf.eth0.rp_filter=1")
	}
	srvB, srvA := listenHost(t, b, 7781), listenHost(t, a, 7782)
	waitHostEncryptedBoth(t, a, b)
	l.waitPing(a, b.pod, 20*time.Second)
	hostTalk(t, a, srvB, "192.0.2.2:7781")
	hostTalk(t, b, srvA, "192.0.2.1:7782")
	for _, n := range []*wgNode{a, b} {
		out, err := exec.Command("ip", "netns", "exec", n.ns.Name, "nft", "list", "table", "arp", wireguard.IncomingTable).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "meta mark set meta mark | 0x00100000") {
			t.Errorf("%s's arp %s table (%v):\n%s", n.name, wireguard.IncomingTable, err, out)
		}
	}

	recovers(t, l, a, b, "192.0.2.2:7781", "192.0.2.1:7782")
	for _, s := range []*hostServer{srvA, srvB} {
		drainPeers(s)
	}
	for _, n := range []*wgNode{a, b} {
		peer := "192.0.2.2"
		if n == b {
			peer = "192.0.2.1"
		}
		if out := run(t, "ip", "-n", n.ns.Name, "neigh", "show", peer, "dev", "eth0"); !strings.Contains(out, "lladdr") {
			t.Errorf("%s has not resolved %s on eth0: %q", n.name, peer, out)
		}
	}
	// Still encrypted: the recovery is not a fall-back to clear text.
	waitHostEncryptedBoth(t, a, b)
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srvB, "192.0.2.2:7781")
	hostTalk(t, b, srvA, "192.0.2.1:7782")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host payload in clear after the neighbour tables were flushed:\n%s", dumpPcap(t, pcap))
	}
}

// tryHostTalk opens a connection from n's host to addr and checks one
// echo; its error says what failed (for a condition that is retried).
func tryHostTalk(n *wgNode, addr string) error {
	var c net.Conn
	var err error
	if derr := n.ns.NetNS.Do(func(ns.NetNS) error {
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return nil
	}); derr != nil {
		return derr
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return exchange(c, 1)
}

// drainPeers empties s's record of the clients it took (the retries
// above left theirs).
func drainPeers(s *hostServer) {
	for {
		select {
		case <-s.peers:
		default:
			return
		}
	}
}

// arpAnswered sends one ARP request from n's eth0 (who has target, tell
// n's address) and waits up to a second for target's reply: it proves
// that target's node answers n's ARP, whatever either neighbour table
// holds (a node also learns a neighbour from that neighbour's own
// requests, which hides the bug while both happen to be sending).
func arpAnswered(n *wgNode, target string) error {
	own := net.ParseIP(strings.Split(n.addr, "/")[0]).To4()
	tip := net.ParseIP(target).To4()
	var res error
	err := n.ns.NetNS.Do(func(ns.NetNS) error {
		link, err := net.InterfaceByName("eth0")
		if err != nil {
			return err
		}
		proto := uint16(unix.ETH_P_ARP<<8&0xff00 | unix.ETH_P_ARP>>8) // network order
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: link.Index}); err != nil {
			return err
		}
		tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		// htype 1 (Ethernet), ptype 0x0800, hlen 6, plen 4, op 1 (request).
		req := append([]byte{0, 1, 8, 0, 6, 4, 0, 1}, link.HardwareAddr...)
		req = append(append(append(req, own...), make([]byte, 6)...), tip...)
		bcast := &unix.SockaddrLinklayer{Protocol: proto, Ifindex: link.Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
		if err := unix.Sendto(fd, req, 0, bcast); err != nil {
			return err
		}
		buf := make([]byte, 128)
		for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
			k, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue // the receive timeout: look at the clock again
			}
			// A reply (op 2) from target's address to ours.
			if k >= 28 && buf[7] == 2 && net.IP(buf[14:18]).Equal(tip) && net.IP(buf[24:28]).Equal(own) {
				return nil
			}
		}
		res = fmt.Errorf("%s's ARP request for %s: no reply within 1s", n.name, target)
		return nil
	})
	if err != nil {
		return err
	}
	return res
}
