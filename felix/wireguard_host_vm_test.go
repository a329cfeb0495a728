package felix_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
)

// TestWireguardHostEncryptionInVM: host encryption with the kernel's
// WireGuard (the VM's kernel has the module; this machine's has not).
// The kernel device carries the mark, the rule and table 82 are there,
// and 1 MiB of host-to-host TCP between the node addresses is answered
// and goes through wg.routed (its byte counter grows by at least that:
// the device's own UDP left by the main table instead of looping);
// turned off, the rule and routes go and the same transfer bypasses
// the device. The VM has no tcpdump: the counters stand in for the
// capture of TestWireguardHostEncryption. tests/vm runs it.
func TestWireguardHostEncryptionInVM(t *testing.T) {
	requireVM(t)
	a, b := vmNodes(t)
	felixes := vmFelixes(t, a, b, felix.WireguardConfig{Enabled: true, HostEncryption: true})
	nstest.Eventually(t, 30*time.Second, func() string {
		for i, peer := range []string{"node-b", "node-a"} {
			st, err := felixes[i].Wireguard(context.Background())
			if err != nil || len(st.HostPeers) != 1 || st.HostPeers[0].Node != peer || !st.HostPeers[0].Encrypted {
				return fmt.Sprintf("felix %d: host peers %+v %v", i, st.HostPeers, err)
			}
			if len(st.Devices) != 1 || st.Devices[0].Implementation != "kernel" {
				return fmt.Sprintf("felix %d: devices %+v, want the kernel's", i, st.Devices)
			}
		}
		return ""
	})
	a.Do(t, func() error {
		c, err := wgctrl.New()
		if err != nil {
			return err
		}
		defer c.Close()
		d, err := c.Device(wireguard.DeviceV4)
		if err == nil && d.FirewallMark != wireguard.FirewallMark {
			err = fmt.Errorf("kernel device fwmark %#x, want %#x", d.FirewallMark, wireguard.FirewallMark)
		}
		return err
	})
	if !hasHostRule(t, a) {
		t.Error("node-a has no host encryption rule")
	}

	var ln net.Listener
	b.Do(t, func() (err error) { ln, err = net.Listen("tcp", "192.0.2.2:7790"); return err })
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	sent := func() int64 {
		st, err := felixes[0].Wireguard(context.Background())
		if err != nil || len(st.Devices) != 1 || len(st.Devices[0].Peers) != 1 {
			t.Fatalf("node-a's device: %+v %v", st, err)
		}
		return st.Devices[0].Peers[0].TxBytes
	}
	transfer := func() {
		t.Helper()
		var c net.Conn
		a.Do(t, func() (err error) { c, err = net.DialTimeout("tcp", "192.0.2.2:7790", 5*time.Second); return err })
		defer c.Close()
		msg := bytes.Repeat([]byte(hostSecret), 1<<20/len(hostSecret))
		go func() { _, _ = c.Write(msg) }()
		got := make([]byte, len(msg))
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("host transfer: %v", err)
		}
	}
	before := sent()
	transfer()
	if d := sent() - before; d < 1<<20 {
		t.Errorf("host encryption on: wg.routed sent %d bytes during a 1 MiB host transfer, want at least 1 MiB", d)
	}

	for _, f := range felixes {
		f.SetWireguardHostEncryption(false)
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		if hasHostRule(t, a) || hasHostRule(t, b) {
			return "the host encryption rule is still there"
		}
		return ""
	})
	before = sent()
	transfer()
	if d := sent() - before; d > 1<<18 {
		t.Errorf("host encryption off: wg.routed sent %d bytes during a 1 MiB host transfer, want it to bypass the device", d)
	}
}

func hasHostRule(t *testing.T, n *nstest.NS) bool {
	t.Helper()
	rules, err := n.Handle.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if r.Table == wireguard.RouteTable && r.Invert && r.Mark == wireguard.FirewallMark {
			return true
		}
	}
	return false
}
