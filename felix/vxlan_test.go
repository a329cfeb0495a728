package felix_test

import (
	"fmt"
	"maps"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
)

func vxlanPool(name, cidr, mode string) *api.IPPool {
	p := pool(name, cidr, "Never", false)
	p.Spec.VXLANMode = mode
	return p
}

func vxlanNode(name, address, vtep string) *api.Node {
	n := node(name, address, "")
	n.Spec.IPv4VXLANTunnelAddr = vtep
	n.Spec.VXLANTunnelMACAddr = felix.VXLANMAC(name).String()
	return n
}

// vxlanState reads vxlan.routed's permanent ARP and FDB entries.
func vxlanState(t *testing.T, h *harness) (link netlink.Link, arp, fdb map[string]string) {
	return vxlanEntries(t, h, felix.VXLANDevice, netlink.FAMILY_V4)
}

// vxlanEntries reads a VXLAN device's permanent neighbour entries of a
// family (ARP, NDP) and its permanent FDB entries.
func vxlanEntries(t *testing.T, h *harness, dev string, family int) (link netlink.Link, neigh, fdb map[string]string) {
	t.Helper()
	neigh, fdb = map[string]string{}, map[string]string{}
	link, err := h.ns.Handle.LinkByName(dev)
	if err != nil {
		return nil, neigh, fdb
	}
	for fam, m := range map[int]map[string]string{family: neigh, unix.AF_BRIDGE: fdb} {
		ns, err := h.ns.Handle.NeighList(link.Attrs().Index, fam)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.LinkIndex == link.Attrs().Index && n.State&netlink.NUD_PERMANENT != 0 {
				m[n.IP.String()] = n.HardwareAddr.String()
			}
		}
	}
	return link, neigh, fdb
}

// vxlanExpect is a VXLAN device as felix should leave it: routed's VNI
// and port, local address, MTU, MAC, up, and exactly these permanent
// neighbour (ARP or NDP, by family) and FDB entries.
type vxlanExpect struct {
	dev        string
	family     int
	local      string
	mtu        int
	mac        net.HardwareAddr
	neigh, fdb map[string]string
}

// diff says how the device differs from e ("" if it does not).
func (e vxlanExpect) diff(t *testing.T, h *harness) string {
	link, neigh, fdb := vxlanEntries(t, h, e.dev, e.family)
	if link == nil {
		return "no " + e.dev
	}
	vx, ok := link.(*netlink.Vxlan)
	switch {
	case !ok:
		return fmt.Sprintf("%s is a %s", e.dev, link.Type())
	case vx.VxlanId != felix.VXLANVNI || vx.Port != felix.VXLANPort || !vx.SrcAddr.Equal(net.ParseIP(e.local)):
		return fmt.Sprintf("vni %d port %d local %v", vx.VxlanId, vx.Port, vx.SrcAddr)
	case vx.MTU != e.mtu:
		return fmt.Sprintf("MTU %d, want %d", vx.MTU, e.mtu)
	case vx.HardwareAddr.String() != e.mac.String() || vx.Flags&net.FlagUp == 0:
		return fmt.Sprintf("mac %s flags %v", vx.HardwareAddr, vx.Flags)
	case !maps.Equal(neigh, e.neigh):
		return fmt.Sprintf("neighbours %v, want %v", neigh, e.neigh)
	case !maps.Equal(fdb, e.fdb):
		return fmt.Sprintf("FDB %v, want %v", fdb, e.fdb)
	}
	return ""
}

// TestVXLANDeviceFDBAndRoutes: a VXLAN CrossSubnet pool gives this node
// vxlan.routed (VNI 4096, port 4789, MTU host-50, its address and MAC),
// one ARP and one FDB entry per remote VTEP, cross-subnet blocks via the
// remote VTEP onlink and same-subnet blocks direct; a stale entry someone
// adds is removed, a node that goes away loses its entries and routes,
// and switching the pool to Never removes the device and routes directly.
func TestVXLANDeviceFDBAndRoutes(t *testing.T) {
	h := newHarness(t, nil)
	macB, macC := felix.VXLANMAC("node-b").String(), felix.VXLANMAC("node-c").String()
	p := vxlanPool("vx", "10.244.0.0/16", "CrossSubnet")
	h.f.ReplaceResources(resources(p,
		vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0"),
		vxlanNode("node-b", "192.0.2.2/24", "10.244.2.0"),    // same subnet
		vxlanNode("node-c", "198.51.100.3/24", "10.244.3.0"), // another subnet
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-c", CIDR: pfx("10.244.3.0/26"), State: felix.AffinityConfirmed},
	})
	want := vxlanExpect{dev: felix.VXLANDevice, family: netlink.FAMILY_V4, local: "192.0.2.1",
		mtu: 1400 - felix.VXLANOverhead, mac: felix.VXLANMAC("node-a"),
		neigh: map[string]string{"10.244.2.0": macB, "10.244.3.0": macC},
		fdb:   map[string]string{"192.0.2.2": macB, "198.51.100.3": macC}}
	nstest.Eventually(t, 5*time.Second, func() string { return want.diff(t, h) })
	vxIdx, eth0 := h.index(t, felix.VXLANDevice), h.index(t, "eth0")
	onlink := func(gw string) func(netlink.Route) bool {
		return func(r netlink.Route) bool {
			return r.Gw.String() == gw && r.LinkIndex == vxIdx && r.Flags&unix.RTNH_F_ONLINK != 0
		}
	}
	h.routeIs(t, "10.244.3.0/26", 5*time.Second, onlink("10.244.3.0"), "via 10.244.3.0 dev vxlan.routed onlink")
	h.routeIs(t, "10.244.2.0/26", time.Second, viaRoute("192.0.2.2", eth0), "via 192.0.2.2 dev eth0 (same subnet)")
	addrs, err := h.ns.Handle.AddrList(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Index: vxIdx}}, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.244.1.0/32" {
		t.Errorf("vxlan.routed addresses %v (%v), want 10.244.1.0/32", addrs, err)
	}
	if mtu, err := felix.ReadMTUFile(h.cfg.MTUFile); err != nil || mtu != 1400-felix.VXLANOverhead {
		t.Errorf("pod MTU %d (%v), want %d", mtu, err, 1400-felix.VXLANOverhead)
	}

	// A stale entry (a node that left while felix was down) goes at the
	// next resync; node-c leaving removes its entries and route.
	h.ip(t, "neigh", "add", "10.244.9.9", "lladdr", "66:00:00:00:00:09", "dev", felix.VXLANDevice, "nud", "permanent")
	h.f.DeleteResource(api.KindNode, "node-c")
	nstest.Eventually(t, 5*time.Second, func() string {
		_, arp, fdb := vxlanState(t, h)
		if len(arp) != 1 || arp["10.244.2.0"] != macB || len(fdb) != 1 || fdb["192.0.2.2"] != macB {
			return fmt.Sprintf("ARP %v FDB %v, want only node-b's", arp, fdb)
		}
		return ""
	})

	// Switching the pool to Never: no device, the blocks routed directly.
	h.f.SetResource(vxlanNode("node-c", "198.51.100.3/24", "10.244.3.0"))
	h.f.SetResource(vxlanPool("vx", "10.244.0.0/16", "Never"))
	nstest.Eventually(t, 5*time.Second, func() string {
		if _, err := h.ns.Handle.LinkByName(felix.VXLANDevice); err == nil {
			return felix.VXLANDevice + " still present"
		}
		return ""
	})
	h.routeIs(t, "10.244.2.0/26", 5*time.Second, viaRoute("192.0.2.2", eth0), "via 192.0.2.2 dev eth0")
	// And back: the device returns and node-c's block goes over it again.
	h.f.SetResource(vxlanPool("vx", "10.244.0.0/16", "Always"))
	nstest.Eventually(t, 5*time.Second, func() string {
		r, ok := h.ns.Routes(t)[pfx("10.244.2.0/26")]
		l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
		if !ok || err != nil || r.LinkIndex != l.Attrs().Index || r.Gw.String() != "10.244.2.0" {
			return fmt.Sprintf("10.244.2.0/26 = %v (device: %v), want via 10.244.2.0 dev vxlan.routed (Always)", r, err)
		}
		return ""
	})
}

// vxlanNode6 is a dual-stack node with IPv4 and IPv6 VTEPs.
func vxlanNode6(name, address, address6, vtep, vtep6 string) *api.Node {
	n := vxlanNode(name, address, vtep)
	n.Spec.BGP.IPv6Address = address6
	n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6 = vtep6, felix.VXLANMACV6(name).String()
	return n
}

// TestVXLANv6DeviceFDBAndRoutes: an IPv6 VXLAN CrossSubnet pool next to
// an IPv4 one gives this node vxlan-v6.routed beside vxlan.routed (both
// VNI 4096 on port 4789: the kernel tells them apart by family), local
// address the node's IPv6 address, MTU host-70, its MAC and its /128;
// one NDP and one FDB entry (MAC -> node IPv6 address) per remote IPv6
// VTEP; the cross-subnet IPv6 block via the remote VTEP onlink and the
// same-subnet one direct; the pod MTU host-70. Switching the IPv6 pool
// to Never removes only vxlan-v6.routed.
func TestVXLANv6DeviceFDBAndRoutes(t *testing.T) {
	h := newHarness(t, nil)
	h.ns.AddAddr(t, "eth0", "fd00:10:1::1/64")
	// The IPv6 router: without VXLAN, other subnets' blocks go through it.
	h.ip(t, "-6", "route", "add", "default", "via", "fd00:10:1::fe", "dev", "eth0", "proto", "static")
	macB, macC := felix.VXLANMACV6("node-b").String(), felix.VXLANMACV6("node-c").String()
	p6 := vxlanPool("vx6", "fd00:244::/48", "CrossSubnet")
	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "CrossSubnet"), p6,
		vxlanNode6("node-a", "192.0.2.1/24", "fd00:10:1::1/64", "10.244.1.0", "fd00:244::"),
		vxlanNode6("node-b", "192.0.2.2/24", "fd00:10:1::2/64", "10.244.2.0", "fd00:244::40"),    // same subnet
		vxlanNode6("node-c", "198.51.100.3/24", "fd00:10:2::3/64", "10.244.3.0", "fd00:244::80"), // another subnet
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("fd00:244::/122"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("fd00:244::40/122"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed}, // holds node-b's VTEP
		{Node: "node-c", CIDR: pfx("fd00:244::80/122"), State: felix.AffinityConfirmed},
		{Node: "node-c", CIDR: pfx("10.244.3.0/26"), State: felix.AffinityConfirmed},
	})
	want := vxlanExpect{dev: felix.VXLANDeviceV6, family: netlink.FAMILY_V6, local: "fd00:10:1::1",
		mtu: 1400 - felix.VXLANOverheadV6, mac: felix.VXLANMACV6("node-a"),
		neigh: map[string]string{"fd00:244::40": macB, "fd00:244::80": macC},
		fdb:   map[string]string{"fd00:10:1::2": macB, "fd00:10:2::3": macC}}
	nstest.Eventually(t, 5*time.Second, func() string { return want.diff(t, h) })
	if link, arp, _ := vxlanState(t, h); link == nil || len(arp) != 2 {
		t.Errorf("%s beside it: %v, ARP %v (want the IPv4 device with 2 entries)", felix.VXLANDevice, link, arp)
	}
	vx6, eth0 := h.index(t, felix.VXLANDeviceV6), h.index(t, "eth0")
	h.routeIs(t, "fd00:244::80/122", 5*time.Second, func(r netlink.Route) bool {
		return r.Gw.String() == "fd00:244::80" && r.LinkIndex == vx6 && r.Flags&unix.RTNH_F_ONLINK != 0
	}, "via fd00:244::80 dev vxlan-v6.routed onlink")
	h.routeIs(t, "fd00:244::40/122", time.Second, viaRoute("fd00:10:1::2", eth0), "via fd00:10:1::2 dev eth0 (same subnet)")
	h.routeIs(t, "10.244.3.0/26", time.Second, func(r netlink.Route) bool { return r.Gw.String() == "10.244.3.0" }, "via 10.244.3.0 dev vxlan.routed")
	nstest.Eventually(t, 3*time.Second, func() string {
		addrs, err := h.ns.Handle.AddrList(&netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Index: vx6}}, netlink.FAMILY_V6)
		var global []string
		for _, a := range addrs {
			if ip, _ := netip.AddrFromSlice(a.IP); !ip.IsLinkLocalUnicast() {
				global = append(global, a.IPNet.String())
			}
		}
		if err != nil || len(global) != 1 || global[0] != "fd00:244::/128" {
			return fmt.Sprintf("%s addresses %v (%v), want fd00:244::/128", felix.VXLANDeviceV6, global, err)
		}
		return ""
	})
	if mtu, err := felix.ReadMTUFile(h.cfg.MTUFile); err != nil || mtu != 1400-felix.VXLANOverheadV6 {
		t.Errorf("pod MTU %d (%v), want %d", mtu, err, 1400-felix.VXLANOverheadV6)
	}

	// The IPv6 pool to Never: vxlan-v6.routed goes, vxlan.routed stays,
	// the other subnet's IPv6 block goes through the router.
	p6.Spec.VXLANMode = "Never"
	h.f.SetResource(p6)
	nstest.Eventually(t, 5*time.Second, func() string {
		if _, err := h.ns.Handle.LinkByName(felix.VXLANDeviceV6); err == nil {
			return felix.VXLANDeviceV6 + " still present"
		}
		if link, _, _ := vxlanState(t, h); link == nil {
			return felix.VXLANDevice + " went too"
		}
		return ""
	})
	h.routeIs(t, "fd00:244::80/122", 5*time.Second, viaRoute("fd00:10:1::fe", eth0), "via fd00:10:1::fe dev eth0 (the router)")
}
