package felix_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestVXLANFromStrangerDropped: a host on the node's network that is no
// node (192.0.2.66) sends VXLAN frames to the node without pause from
// before felix knows anything; felix creates vxlan.routed, and the
// device never unwraps one of them (the outer-source check is written
// before the device exists), each counted encap-src/not-node. Node
// node-b's frames (from its BGP address 192.0.2.2) are unwrapped, as
// are those of an address in externalNodesList (192.0.2.128/25,
// SetExternalNodes); once externalNodesList is emptied, and once node-b
// is gone from the datastore, theirs are dropped too. Real UDP from a
// namespace on the node's link, counted by the device and the kernel's
// policy counter.
func TestVXLANFromStrangerDropped(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.Features.DisablePolicy = false })
	out := nstest.New(t)
	peer, err := h.ns.Handle.LinkByName("eth0peer")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ns.Handle.LinkSetNsFd(peer, int(out.NetNS.Fd())); err != nil {
		t.Fatal(err)
	}
	eth, err := out.Handle.LinkByName("eth0peer")
	if err != nil {
		t.Fatal(err)
	}
	if err := out.Handle.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"192.0.2.2/24", "192.0.2.66/24", "192.0.2.130/24"} {
		out.AddAddr(t, "eth0peer", a)
	}
	to := net.UDPAddrFromAddrPort(netip.MustParseAddrPort(fmt.Sprintf("192.0.2.1:%d", felix.VXLANPort)))
	frame := vxlanBroadcast(felix.VXLANVNI)
	send := func(from string) {
		t.Helper()
		out.Do(t, func() error {
			c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(from)}, to)
			if err != nil {
				return err
			}
			defer c.Close()
			_, err = c.Write(frame)
			return err
		})
	}

	// The stranger floods from before felix has its resources.
	var conn *net.UDPConn
	out.Do(t, func() error {
		var err error
		conn, err = net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP("192.0.2.66")}, to)
		return err
	})
	stop, sent := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			if _, err := conn.Write(frame); err == nil {
				n++
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	t.Cleanup(func() { conn.Close() })

	h.f.SetExternalNodes([]netip.Prefix{netip.MustParsePrefix("192.0.2.128/25")})
	nodeB := vxlanNode("node-b", "192.0.2.2/24", "10.244.2.0")
	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "Always"),
		vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0"), nodeB))
	h.f.ReplaceAffinities(nil)

	ctx := context.Background()
	dropped := func() uint64 {
		cs, err := h.f.PolicyCounters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Rule == nftdp.EncapSrcDropID {
				return c.Packets
			}
		}
		return 0
	}
	rx := func() uint64 {
		l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
		if err != nil {
			return 0
		}
		return l.Attrs().Statistics.RxPackets
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
		if err != nil {
			return err.Error()
		}
		if l.Attrs().OperState != netlink.OperUp && l.Attrs().Flags&net.FlagUp == 0 {
			return felix.VXLANDevice + " not up"
		}
		return ""
	})
	before := dropped()
	nstest.Eventually(t, 10*time.Second, func() string {
		if n := dropped(); n <= before {
			return fmt.Sprintf("the stranger's frames: %s still %d", nftdp.EncapSrcDropID, n)
		}
		return ""
	})
	close(stop)
	if n := <-sent; n == 0 {
		t.Fatal("the stranger sent no frame")
	}
	if n := rx(); n != 0 {
		t.Fatalf("%s unwrapped %d frames from the stranger", felix.VXLANDevice, n)
	}

	// received waits until from's frames are unwrapped by the device.
	received := func(from string) {
		t.Helper()
		base := rx()
		nstest.Eventually(t, 10*time.Second, func() string {
			if rx() > base {
				return ""
			}
			send(from)
			return fmt.Sprintf("frames from %s never unwrapped", from)
		})
	}
	// refused waits until from's frames are counted as dropped (felix
	// takes the change on its next pass), then checks that ten more
	// are counted and the device unwraps none of them.
	refused := func(from string) {
		t.Helper()
		d := dropped()
		nstest.Eventually(t, 10*time.Second, func() string {
			if dropped() > d {
				return ""
			}
			send(from)
			return fmt.Sprintf("frames from %s not counted as dropped", from)
		})
		base, d := rx(), dropped()
		for range 10 {
			send(from)
		}
		nstest.Eventually(t, 5*time.Second, func() string {
			if n := dropped(); n < d+10 {
				return fmt.Sprintf("10 frames from %s: %s went from %d to %d", from, nftdp.EncapSrcDropID, d, n)
			}
			return ""
		})
		if n := rx(); n != base {
			t.Errorf("%s unwrapped %d frames from %s", felix.VXLANDevice, n-base, from)
		}
	}
	received("192.0.2.2")   // node-b
	received("192.0.2.130") // externalNodesList
	refused("192.0.2.66")

	h.f.SetExternalNodes(nil)
	refused("192.0.2.130")
	received("192.0.2.2")

	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "Always"), vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0")))
	refused("192.0.2.2")
}
