package felix_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/wireguard"
)

// TestWireguardRebootInVM: a node rebooted with the kernel's WireGuard
// (its key file kept, its device gone) greets its peers as its new
// device is configured. Its peer still holds the old session and sends
// under it, which the new device cannot read; without the greeting the
// peer notices only after WireGuard's own timeouts (10 s without an
// answer, then a handshake: about 15 s). The kernel sends a new peer's
// greeting keepalive only while the device is up, so felix brings it
// up before configuring it. Pod traffic from node-a to node-b must be
// answered again within 3 s of node-b's device holding node-a's peer.
// tests/vm runs it.
func TestWireguardRebootInVM(t *testing.T) {
	requireVM(t)
	a, b := vmNodes(t)
	l := newVMLab(t, a, b, felix.WireguardConfig{Enabled: true})
	na, nb := l.nodes[0], l.nodes[1]

	var srv *net.UDPConn
	b.Do(t, func() (err error) {
		srv, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("10.244.2.5"), Port: 7792})
		return err
	})
	t.Cleanup(func() { srv.Close() })
	go func() {
		buf := make([]byte, 64)
		for {
			n, from, err := srv.ReadFromUDP(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteToUDP(buf[:n], from)
		}
	}()
	var cl *net.UDPConn
	a.Do(t, func() (err error) {
		cl, err = net.ListenUDP("udp", &net.UDPAddr{IP: net.ParseIP("10.244.1.5")})
		return err
	})
	t.Cleanup(func() { cl.Close() })
	seq := 0
	// echo sends one probe from node-a's pod address and waits 200 ms
	// for it to come back.
	echo := func() error {
		seq++
		want := fmt.Sprint(seq)
		if _, err := cl.WriteToUDP([]byte(want), srv.LocalAddr().(*net.UDPAddr)); err != nil {
			return err
		}
		buf := make([]byte, 64)
		for {
			_ = cl.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			n, err := cl.Read(buf)
			if err != nil {
				return err
			}
			if string(buf[:n]) == want {
				return nil
			}
		}
	}
	keys := map[string]string{}
	kernelWithPeer := func(n *vmNode) string {
		st, err := n.f.Wireguard(context.Background())
		if err != nil || len(st.Devices) != 1 || st.Devices[0].Implementation != "kernel" || len(st.Devices[0].Peers) != 1 {
			return fmt.Sprintf("%s: want the kernel's device with one peer: %+v %v", n.name, st, err)
		}
		keys[n.name] = st.Devices[0].PublicKey
		return ""
	}
	nstest.Eventually(t, 30*time.Second, func() string {
		if m := kernelWithPeer(na) + kernelWithPeer(nb); m != "" {
			return m
		}
		if err := echo(); err != nil {
			return "node-a to node-b's pod: " + err.Error()
		}
		return ""
	})

	// The reboot: routed stops (the kernel device stays), the device
	// goes with the reboot, routed starts on the same key file.
	before := keys[nb.name]
	l.stop(nb)
	dev, err := b.Handle.LinkByName(wireguard.DeviceV4)
	if err != nil {
		t.Fatalf("node-b's device after routed stopped: %v", err)
	}
	if err := b.Handle.LinkDel(dev); err != nil {
		t.Fatal(err)
	}
	l.start(nb)
	nstest.Eventually(t, 30*time.Second, func() string { return kernelWithPeer(nb) })
	configured := time.Now()
	if keys[nb.name] != before {
		// A new key would be greeted by node-a (kickRekeyed) instead:
		// this test is about the kept key's greeting (kick).
		t.Fatalf("node-b's key after the reboot %s, want the kept %s", keys[nb.name], before)
	}
	var last error
	for {
		err := echo()
		if err == nil {
			break
		}
		last = err
		if time.Since(configured) > 30*time.Second {
			t.Fatalf("node-a's pod traffic not answered 30 s after node-b's device was configured")
		}
	}
	took := time.Since(configured)
	t.Logf("node-a's pod traffic answered %v after rebooted node-b's device was configured (%d probes in all; last error %v)", took.Round(time.Millisecond), seq, last)
	if took > 3*time.Second {
		t.Errorf("answered %v after node-b's device was configured, want < 3 s: node-b did not greet node-a (WireGuard's own timeouts take ~15 s)", took.Round(time.Millisecond))
	}
}
