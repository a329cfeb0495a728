package felix_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
)

// The payload of host-to-host TCP: "ROUTEDHOSTSECRET", repeated.
const hostSecret = "ROUTEDHOSTSECRET"

// hostServer is a TCP server on a node's host address: it reads what a
// client sends, answers it back, and records each client's address.
type hostServer struct {
	ln    net.Listener
	peers chan string
}

func listenHost(t *testing.T, n *wgNode, port int) *hostServer {
	t.Helper()
	return listenOn(t, n, net.JoinHostPort(strings.Split(n.addr, "/")[0], fmt.Sprint(port)))
}

// listenOn is listenHost on another address of n's (host:port).
func listenOn(t *testing.T, n *wgNode, addrPort string) *hostServer {
	t.Helper()
	s := &hostServer{peers: make(chan string, 64)}
	n.ns.Do(t, func() (err error) {
		s.ln, err = net.Listen("tcp", addrPort)
		return err
	})
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.peers <- c.RemoteAddr().(*net.TCPAddr).IP.String()
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return s
}

// dialHost connects from n's host namespace to addr.
func dialHost(t *testing.T, n *wgNode, addr string) net.Conn {
	t.Helper()
	var c net.Conn
	began := time.Now()
	n.ns.Do(t, func() (err error) {
		// The kernel's SYN retries at 1 and 3 s fit (a loaded
		// machine); WireGuard's 15-s rekey does not. SYNs lost for
		// 15-19 s after both nodes said encrypted were a session that
		// worked one way only, from crossed handshakes (the wireguard
		// package's kick): this deadline catches that again.
		c, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	})
	if d := time.Since(began); d > 2*time.Second {
		t.Logf("host connection to %s took %v", addr, d.Round(time.Millisecond))
	}
	return c
}

// exchange sends the secret over c count times and checks each echo.
func exchange(c net.Conn, count int) error {
	msg := []byte(strings.Repeat(hostSecret, 4))
	buf := make([]byte, len(msg))
	for range count {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(msg); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if !bytes.Equal(buf, msg) {
			return fmt.Errorf("echo %q, want %q", buf, msg)
		}
	}
	return nil
}

// hostTalk opens a connection from a's host to b's host, exchanges the
// secret and returns the source address b saw.
func hostTalk(t *testing.T, a *wgNode, srv *hostServer, to string) string {
	t.Helper()
	c := dialHost(t, a, to)
	defer c.Close()
	if err := exchange(c, 5); err != nil {
		t.Fatalf("host %s -> %s: %v", a.name, to, err)
	}
	select {
	case p := <-srv.peers:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("the server saw no connection")
		return ""
	}
}

func dumpPcap(t *testing.T, pcap []byte) string {
	f := filepath.Join(t.TempDir(), "dump.pcap")
	_ = os.WriteFile(f, pcap, 0o600)
	out, _ := exec.Command("tcpdump", "-nn", "-r", f).CombinedOutput()
	return string(out)
}

// waitHostEncrypted waits until n's status says host traffic to peer
// is encrypted (a handshake confirmed it).
func waitHostEncrypted(t *testing.T, n *wgNode, peer string, want bool) felix.WireguardStatus {
	t.Helper()
	var st felix.WireguardStatus
	// Generous: under -race userspace WireGuard's handshakes after a
	// rotation took 21 s (1 s without).
	nstest.Eventually(t, 60*time.Second, func() string {
		var err error
		if st, err = n.f.Wireguard(context.Background()); err != nil {
			return err.Error()
		}
		for _, h := range st.HostPeers {
			if h.Node == peer && h.Encrypted == want {
				return ""
			}
		}
		return fmt.Sprintf("%s: host peers %+v, want %s encrypted=%v", n.name, st.HostPeers, peer, want)
	})
	return st
}

// waitHostEncryptedBoth waits until a encrypts its host traffic to b
// and b to a.
func waitHostEncryptedBoth(t *testing.T, a, b *wgNode) {
	t.Helper()
	waitHostEncrypted(t, a, b.name, true)
	waitHostEncrypted(t, b, a.name, true)
}

// setHostEncryption sets routed's host encryption flag on each node.
func setHostEncryption(on bool, nodes ...*wgNode) {
	for _, n := range nodes {
		n.f.SetWireguardHostEncryption(on)
	}
}

// openHostSession opens a long-lived TCP connection from a's host to
// srv at addr (as a BGP or etcd session would be), checks one echo and
// that srv took it; it is closed when the test ends.
func openHostSession(t *testing.T, a *wgNode, srv *hostServer, addr string) net.Conn {
	t.Helper()
	c := dialHost(t, a, addr)
	t.Cleanup(func() { c.Close() })
	if err := exchange(c, 1); err != nil {
		t.Fatal(err)
	}
	<-srv.peers
	return c
}

// skipShortRace skips a timing-sensitive host-encryption lab in -short
// runs: make test runs felix twice, in full (where these run) and with
// -race -short, where the race detector slows userspace WireGuard so
// much that its handshakes and the labs' deadlines race (failed once
// there on a fresh clone; they pass in the full pass and without -race).
func skipShortRace(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("userspace WireGuard timing under -race: run in make test's full pass")
	}
}

func hostRule(t *testing.T, n *wgNode) string {
	return run(t, "ip", "-n", n.ns.Name, "rule", "show", "table", fmt.Sprint(wireguard.RouteTable))
}

func hostTable(t *testing.T, n *wgNode) string {
	out, err := exec.Command("ip", "-n", n.ns.Name, "route", "show", "table", fmt.Sprint(wireguard.RouteTable)).CombinedOutput()
	if err != nil && !strings.Contains(string(out), "FIB table does not exist") {
		t.Fatalf("ip route show table: %v: %s", err, out)
	}
	return string(out)
}

// TestWireguardHostEncryption: two nodes with userspace WireGuard and
// host encryption. Host-to-host TCP between the node addresses is
// answered and never crosses the uplink in clear (only UDP 51820 does:
// wireguard-go's marked sockets leave by the main table instead of
// looping into wg.routed); pod traffic is still encrypted; a TCP
// connection opened in clear before host encryption came on (a BGP or
// etcd session) survives it going on and off; turned off, the rule,
// the table's routes and the incoming mark tables (inet and arp) go and
// the same payload is on the wire in clear
// (the capture can see it); on again, encrypted again.
func TestWireguardHostEncryption(t *testing.T) {
	l := newWGLab(t, nil)
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	l.waitPing(a, b.pod, 20*time.Second)
	srv := listenHost(t, b, 7777)

	// A long-lived session, opened in clear before host encryption.
	session := openHostSession(t, a, srv, "192.0.2.2:7777")

	began := time.Now()
	setHostEncryption(true, a, b)
	st := waitHostEncrypted(t, a, "node-b", true)
	waitHostEncrypted(t, b, "node-a", true)
	t.Logf("host encryption on: both nodes encrypt host traffic %v after it was turned on", time.Since(began).Round(time.Millisecond))
	if !st.HostEncryption {
		t.Error("status: hostEncryption false with host encryption on")
	}
	if r := hostRule(t, a); !strings.Contains(r, "not from all fwmark 0x100000/0x100000 lookup 82") || !strings.Contains(r, "proto 82") {
		t.Errorf("node-a's rule: %q, want not fwmark 0x100000/0x100000 lookup 82 proto 82", r)
	}
	if r := hostTable(t, a); !strings.Contains(r, "192.0.2.2 dev "+wireguard.DeviceV4) || !strings.Contains(r, "proto 82") || !strings.Contains(r, "src 192.0.2.1") {
		t.Errorf("node-a's table 82: %q, want 192.0.2.2 dev %s proto 82 src 192.0.2.1", r, wireguard.DeviceV4)
	}

	stop := capture(t, a, "192.0.2.2")
	from := hostTalk(t, a, srv, "192.0.2.2:7777")
	if err := exchange(session, 3); err != nil {
		t.Errorf("the session opened in clear broke when host encryption came on: %v", err)
	}
	sent, got := l.ping(a, b.pod, 5, "0.05", "1", secretHex)
	// A pod to the other node's host address is routed by table 82 too.
	psent, pgot := l.ping(a, "192.0.2.2", 5, "0.05", "1", secretHex)
	pcap := stop()
	if pgot != psent {
		t.Errorf("node-a's pod to node-b's host address: %d of %d answered", pgot, psent)
	}
	if from != "192.0.2.1" {
		t.Errorf("node-b saw the connection from %s, want node-a's address 192.0.2.1", from)
	}
	if bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host-to-host payload crossed the uplink in clear with host encryption on:\n%s", dumpPcap(t, pcap))
	}
	if got != sent || bytes.Contains(pcap, []byte(secret)) {
		t.Errorf("pod traffic: %d of %d answered, payload in clear %v", got, sent, bytes.Contains(pcap, []byte(secret)))
	}
	if n := udpPackets(t, pcap, wireguard.PortV4); n < 10 {
		t.Errorf("%d packets on UDP %d, want the host and pod traffic there", n, wireguard.PortV4)
	}

	// Off: rule and routes go, the payload is in clear (negative control).
	setHostEncryption(false, a, b)
	nstest.Eventually(t, 10*time.Second, func() string {
		for _, n := range []*wgNode{a, b} {
			if r := hostRule(t, n); strings.TrimSpace(r) != "" {
				return n.name + " still has the rule: " + r
			}
			if r := hostTable(t, n); strings.Contains(r, "192.0.2.") {
				return n.name + " still has routes in table 82: " + r
			}
			for _, fam := range []string{"inet", "arp"} {
				if out, err := exec.Command("ip", "netns", "exec", n.ns.Name, "nft", "list", "table", fam, wireguard.IncomingTable).CombinedOutput(); err == nil {
					return n.name + " still has the incoming mark table " + fam + ":\n" + string(out)
				}
			}
		}
		return ""
	})
	stop = capture(t, a, "192.0.2.2")
	hostTalk(t, a, srv, "192.0.2.2:7777")
	if err := exchange(session, 3); err != nil {
		t.Errorf("the session broke when host encryption went off: %v", err)
	}
	if pcap := stop(); !bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host encryption off: the host payload should be on the wire in clear; the capture check is blind:\n%s", dumpPcap(t, pcap))
	}
	if st, _ := a.f.Wireguard(context.Background()); st.HostEncryption || len(st.HostPeers) != 0 {
		t.Errorf("status with host encryption off: %v %+v", st.HostEncryption, st.HostPeers)
	}

	// On again.
	setHostEncryption(true, a, b)
	waitHostEncryptedBoth(t, a, b)
	stop = capture(t, a, "192.0.2.2")
	hostTalk(t, a, srv, "192.0.2.2:7777")
	if err := exchange(session, 3); err != nil {
		t.Errorf("the session broke when host encryption came on again: %v", err)
	}
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Error("host encryption on again: host payload in clear")
	}
}
