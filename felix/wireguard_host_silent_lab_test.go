package felix_test

import (
	"bytes"
	"context"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestWireguardHostEncryptionPeerRebooted: node-b's routed dies with its
// userspace device (as in a reboot or a crash) and a fresh routed
// starts there with the same key but without its peers yet (it has not
// read the datastore: etcd may be behind node-a). node-a, which had
// confirmed node-b, hears nothing from it through the device for
// HostSilentAfter and sends its host traffic in clear again, so node-b's
// host reaches node-a's host (as it must reach etcd there) and node-a's
// answers are readable; once node-b reads its peers, both encrypt again.
// Before that, an idle but live peer stays encrypted through several
// silence windows: the keepalives of confirmed peers keep it heard, and
// where one end's keepalive timer keeps the other's from firing, the
// handshake felix asks for after half the window does.
func TestWireguardHostEncryptionPeerRebooted(t *testing.T) {
	// Its silence window is timing: a handshake under -race at load 12
	// took over the 60 s wait once, and at 6 s (keepalives every 2 s) a
	// fresh-clone make test at load 10 found the idle, alive peer silent
	// once (then in clear until WireGuard's next handshake, 2 minutes).
	skipShortRace(t)
	const silent = 10 * time.Second
	l := newWGLab(t, func(node string, c *felix.Config) {
		c.WireGuard.HostEncryption, c.WireGuard.HostSilentAfter = true, silent
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	_ = listenHost(t, a, 7101)
	_ = listenHost(t, b, 7102)
	waitHostEncryptedBoth(t, a, b)
	dial := func(from *wgNode, to string) error {
		var derr error
		from.ns.Do(t, func() error {
			c, err := net.DialTimeout("tcp4", to, time.Second)
			if err == nil {
				c.Close()
			}
			derr = err
			return nil
		})
		return derr
	}

	// Idle and alive: still encrypted after three silence windows (a
	// peer whose keepalives another's kept from firing is asked for a
	// handshake before its silence is judged).
	idle := time.Now()
	nstest.Eventually(t, 10*silent, func() string {
		st := waitHostEncrypted(t, a, "node-b", true)
		for _, h := range st.HostPeers {
			if h.Node == "node-b" && !h.Encrypted {
				return "node-a sends node-b's host traffic in clear while node-b is alive: " + h.Reason
			}
		}
		if time.Since(idle) < 3*silent {
			return "idle for " + time.Since(idle).Round(time.Second).String()
		}
		return ""
	})

	l.stop(b)
	run(t, "ip", "-n", b.ns.Name, "link", "del", "wg.routed")
	// The crashed routed's wireguard-go goes with its process: stop it
	// here (the new felix makes a device of its own).
	if err := b.f.CloseWireguard(); err != nil {
		t.Error(err)
	}
	f, err := felix.New(b.cfg)
	if err != nil {
		t.Fatal(err)
	}
	b.f = f
	l.start(b)
	restarted := time.Now()
	nstest.Eventually(t, 3*silent+20*time.Second, func() string {
		if err := dial(b, "192.0.2.1:7101"); err != nil {
			return "node-b's host cannot reach node-a's host: " + err.Error()
		}
		return ""
	})
	t.Logf("node-b's host reached node-a's host %v after its restart (silence limit %v)", time.Since(restarted).Round(100*time.Millisecond), silent)
	st := waitHostEncrypted(t, a, "node-b", false)
	t.Logf("node-a's view of node-b: %+v", st.HostPeers)

	l.feedAll()
	waitHostEncryptedBoth(t, a, b)
	if err := dial(b, "192.0.2.1:7101"); err != nil {
		t.Errorf("encrypted again, node-b's host cannot reach node-a's: %v", err)
	}
	if err := dial(a, "192.0.2.2:7102"); err != nil {
		t.Errorf("encrypted again, node-a's host cannot reach node-b's: %v", err)
	}
}

// TestWireguardHostEncryptionPeerBackAfterSilence: node-b is alive but
// its WireGuard UDP is dropped both ways (nftables in its namespace)
// until both nodes find each other silent and send host traffic in
// clear (it still flows: only UDP 51820 is dropped). Once the drop is
// lifted, both must encrypt host traffic again within
// silenceRecoveryBound. Their old sessions are still valid then and
// WireGuard would not handshake on them for about two minutes; felix
// asks the device for a new handshake when it stops hearing a peer,
// which WireGuard retries every 5 s until it is answered. Without that
// the recovery took until the sessions' rekey (about 95 s after the
// lift here).
func TestWireguardHostEncryptionPeerBackAfterSilence(t *testing.T) {
	skipShortRace(t)
	const silent = 10 * time.Second
	// WireGuard's handshake retry (5 s and up to 1/3 s of jitter), felix's
	// read of the handshakes once a second, and slack for a loaded machine.
	const silenceRecoveryBound = 10 * time.Second
	l := newWGLab(t, func(node string, c *felix.Config) {
		c.WireGuard.HostEncryption, c.WireGuard.HostSilentAfter = true, silent
	})
	a, b := l.nodes["node-a"], l.nodes["node-b"]
	srvB, srvA := listenHost(t, b, 7103), listenHost(t, a, 7104)
	waitHostEncryptedBoth(t, a, b)
	// From a settled pair: right after the first handshake wireguard-go
	// may still retry an initiation, which would handshake after the
	// lift on its own.
	waitKeepalivesOnly(t, a, b)

	drop := "table inet routed-test-silence {\n" +
		" chain in { type filter hook prerouting priority raw - 10; udp dport 51820 drop; udp sport 51820 drop; }\n" +
		" chain out { type filter hook output priority raw - 10; udp dport 51820 drop; udp sport 51820 drop; }\n}\n"
	nftIn(t, b, drop)
	lift := func() {
		_ = exec.Command("ip", "netns", "exec", b.ns.Name, "nft", "delete", "table", "inet", "routed-test-silence").Run()
	}
	t.Cleanup(lift)
	dropped := time.Now()
	waitHostEncrypted(t, a, "node-b", false)
	waitHostEncrypted(t, b, "node-a", false)
	t.Logf("both nodes send host traffic in clear %v after node-b's WireGuard UDP was dropped (silence limit %v)", time.Since(dropped).Round(100*time.Millisecond), silent)
	// In clear, host traffic still flows (only WireGuard's UDP is dropped).
	hostTalk(t, a, srvB, "192.0.2.2:7103")

	lift()
	lifted := time.Now()
	waitHostEncryptedBoth(t, a, b)
	took := time.Since(lifted)
	t.Logf("host traffic encrypted both ways again %v after the drop was lifted (bound %v)", took.Round(10*time.Millisecond), silenceRecoveryBound)
	if took > silenceRecoveryBound {
		t.Errorf("host traffic encrypted again %v after node-b was heard again, want within %v", took.Round(10*time.Millisecond), silenceRecoveryBound)
	}
	stop := capture(t, a, "192.0.2.2")
	hostTalk(t, a, srvB, "192.0.2.2:7103")
	hostTalk(t, b, srvA, "192.0.2.1:7104")
	if pcap := stop(); bytes.Contains(pcap, []byte(hostSecret)) {
		t.Errorf("host payload in clear after both nodes said encrypted again:\n%s", dumpPcap(t, pcap))
	}
}

// waitKeepalivesOnly waits until, over one window longer than
// WireGuard's handshake retry (5 s), each node sent the other nothing
// but keepalives (32 bytes each: a handshake message is 148 or 92).
func waitKeepalivesOnly(t *testing.T, nodes ...*wgNode) {
	t.Helper()
	const window = 6 * time.Second
	tx := func(n *wgNode) int64 {
		st, err := n.f.Wireguard(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, d := range st.Devices {
			for _, p := range d.Peers {
				sum += p.TxBytes
			}
		}
		return sum
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		before := make([]int64, len(nodes))
		for i, n := range nodes {
			before[i] = tx(n)
		}
		time.Sleep(window)
		settled := true
		for i, n := range nodes {
			if d := tx(n) - before[i]; d%32 != 0 {
				settled = false
			}
		}
		if settled {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the WireGuard devices still send handshakes after 90 s")
		}
	}
}

// nftIn loads an nftables ruleset into n's namespace.
func nftIn(t *testing.T, n *wgNode, ruleset string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", n.ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f in %s: %v: %s", n.name, err, out)
	}
}
