package felix_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
)

// TestWorkloadEncapsulationDropFollowsVXLANPort: felix drops what a pod
// sends to the VXLAN port its devices use (nftdp's encapsulation drop,
// proved there against a real VXLAN device): at start Calico's default
// port, and after FelixConfiguration moves the devices to 8472, that
// port too (and the old one still). Real UDP from a pod's namespace to
// the node, counted by the kernel's wl-encap/to-host counter.
func TestWorkloadEncapsulationDropFollowsVXLANPort(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.Features.DisablePolicy = false })
	// The pod's endpoint allows everything: only the encapsulation drop
	// stands between it and the node's VXLAN device.
	ep := wep("encap1", "node-a", "cali-encap1", "10.244.1.5/32")
	ep.Spec.Profiles = []string{"allow-all"}
	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "Always"),
		vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0"),
		vxlanNode("node-b", "192.0.2.2/24", "10.244.2.0"), ep,
		&api.Profile{TypeMeta: api.TypeMeta{Kind: api.KindProfile}, Metadata: api.ObjectMeta{Name: "allow-all"},
			Spec: api.ProfileSpec{Ingress: []api.Rule{{Action: api.ActionAllow}}, Egress: []api.Rule{{Action: api.ActionAllow}}}}))
	h.f.ReplaceAffinities(nil)
	pod := encapPod(t, h, "cali-encap1", "10.244.1.5")

	ctx := context.Background()
	count := func() (uint64, bool) {
		cs, err := h.f.PolicyCounters(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs {
			if c.Rule == "wl-encap/to-host" {
				return c.Packets, true
			}
		}
		return 0, false
	}
	// dropped waits until UDP from the pod to the node's port is counted
	// as encapsulation (sending again while it is not).
	dropped := func(port int) {
		t.Helper()
		before, _ := count()
		to := netip.MustParseAddrPort(fmt.Sprintf("192.0.2.1:%d", port))
		nstest.Eventually(t, 10*time.Second, func() string {
			if n, ok := count(); ok && n > before {
				return ""
			}
			pod.Do(t, func() error {
				c, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(to))
				if err != nil {
					return err
				}
				defer c.Close()
				_, err = c.Write([]byte("vxlan?"))
				return err
			})
			n, _ := count()
			return fmt.Sprintf("UDP to %s: wl-encap/to-host still %d (was %d)", to, n, before)
		})
	}
	dropped(felix.VXLANPort)

	// While a pod sends VXLAN to 8472 without pause, FelixConfiguration
	// moves the devices there: the drop covers 8472 before vxlan.routed
	// listens on it, so the new device never unwraps one (a review found
	// it unwrapping 191-212 frames in 2 of 4 runs when the policy came
	// after the device in felix's pass).
	var conn *net.UDPConn
	pod.Do(t, func() error {
		var err error
		conn, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP("192.0.2.1"), Port: 8472})
		return err
	})
	frame := vxlanBroadcast(felix.VXLANVNI)
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
		}
	}()
	t.Cleanup(func() { conn.Close() })
	h.f.ApplySettings(felix.Settings{VXLANPort: 8472})
	var rx uint64
	nstest.Eventually(t, 10*time.Second, func() string {
		l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
		if err != nil {
			return err.Error()
		}
		if x, ok := l.(*netlink.Vxlan); !ok || x.Port != 8472 {
			return fmt.Sprintf("%s not on 8472: %+v", felix.VXLANDevice, l)
		}
		rx = l.Attrs().Statistics.RxPackets
		return ""
	})
	dropped(8472) // the pod's frames are dropped, and the device has been up meanwhile
	close(stop)
	if n := <-sent; n == 0 {
		t.Fatal("the pod sent no VXLAN frame")
	}
	l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Attrs().Statistics.RxPackets; got != 0 || rx != 0 {
		t.Errorf("%s on 8472 unwrapped %d frames from the pod (%d when first seen there)", felix.VXLANDevice, got, rx)
	}
	dropped(felix.VXLANPort)
}

// vxlanBroadcast is a VXLAN datagram's payload: the VNI and an Ethernet
// broadcast frame (counted by the receiving device as it unwraps it).
func vxlanBroadcast(vni int) []byte {
	b := []byte{0x08, 0, 0, 0, byte(vni >> 16), byte(vni >> 8), byte(vni), 0}
	b = append(b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0x74, 0x01, 0x88, 0xb5)
	return append(b, make([]byte, 46)...)
}

// encapPod wires a pod namespace to the harness's node through iface
// (the node answers for its gateway 169.254.1.1; felix routes addr to
// iface, from the pod's WorkloadEndpoint).
func encapPod(t *testing.T, h *harness, iface, addr string) *nstest.NS {
	t.Helper()
	pod := nstest.New(t)
	h.ns.Veth(t, iface, "podside")
	peer, err := h.ns.Handle.LinkByName("podside")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.ns.Handle.LinkSetNsFd(peer, int(pod.NetNS.Fd())); err != nil {
		t.Fatal(err)
	}
	eth, err := pod.Handle.LinkByName("podside")
	if err != nil {
		t.Fatal(err)
	}
	if err := pod.Handle.LinkSetUp(eth); err != nil {
		t.Fatal(err)
	}
	pod.AddAddr(t, "podside", addr+"/32")
	h.ns.AddAddr(t, "lo", "169.254.1.1/32")
	h.ns.Do(t, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/"+iface+"/proxy_arp", []byte("1"), 0)
	})
	gw := net.ParseIP("169.254.1.1")
	for _, r := range []*netlink.Route{
		{LinkIndex: eth.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK},
		{LinkIndex: eth.Attrs().Index, Gw: gw, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}},
	} {
		if err := pod.Handle.RouteAdd(r); err != nil {
			t.Fatal(err)
		}
	}
	return pod
}
