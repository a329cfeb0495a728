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
)

// TestWorkloadEncapsulationDropFollowsVXLANPort: felix drops what a pod
// sends to the VXLAN port its devices use (nftdp's encapsulation drop,
// proved there against a real VXLAN device): at start Calico's default
// port, and after FelixConfiguration moves the devices to 8472, that
// port too (and the old one still). Real UDP from a pod's namespace to
// the node, counted by the kernel's wl-encap/to-host counter.
func TestWorkloadEncapsulationDropFollowsVXLANPort(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.Features.DisablePolicy = false })
	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "Always"),
		vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0"),
		vxlanNode("node-b", "192.0.2.2/24", "10.244.2.0")))
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
	h.f.ApplySettings(felix.Settings{VXLANPort: 8472})
	dropped(8472)
	dropped(felix.VXLANPort)
}

// encapPod wires a pod namespace to the harness's node through iface
// (the node routes addr to it and answers for its gateway 169.254.1.1).
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
	host, err := h.ns.Handle.LinkByName(iface)
	if err != nil {
		t.Fatal(err)
	}
	gw := net.ParseIP("169.254.1.1")
	for _, r := range []*netlink.Route{
		{LinkIndex: eth.Attrs().Index, Dst: &net.IPNet{IP: gw, Mask: net.CIDRMask(32, 32)}, Scope: netlink.SCOPE_LINK},
		{LinkIndex: eth.Attrs().Index, Gw: gw, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}},
	} {
		if err := pod.Handle.RouteAdd(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.ns.Handle.RouteAdd(&netlink.Route{LinkIndex: host.Attrs().Index, Scope: netlink.SCOPE_LINK,
		Dst: &net.IPNet{IP: net.ParseIP(addr), Mask: net.CIDRMask(32, 32)}}); err != nil {
		t.Fatal(err)
	}
	return pod
}
