package felix_test

import (
	"fmt"
	"net"
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
	t.Helper()
	arp, fdb = map[string]string{}, map[string]string{}
	link, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
	if err != nil {
		return nil, arp, fdb
	}
	for fam, m := range map[int]map[string]string{netlink.FAMILY_V4: arp, unix.AF_BRIDGE: fdb} {
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
	return link, arp, fdb
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
	nstest.Eventually(t, 5*time.Second, func() string {
		link, arp, fdb := vxlanState(t, h)
		if link == nil {
			return "no " + felix.VXLANDevice
		}
		vx, ok := link.(*netlink.Vxlan)
		switch {
		case !ok:
			return fmt.Sprintf("%s is a %s", felix.VXLANDevice, link.Type())
		case vx.VxlanId != felix.VXLANVNI || vx.Port != felix.VXLANPort || !vx.SrcAddr.Equal(net.ParseIP("192.0.2.1")):
			return fmt.Sprintf("vni %d port %d local %v", vx.VxlanId, vx.Port, vx.SrcAddr)
		case vx.MTU != 1400-felix.VXLANOverhead:
			return fmt.Sprintf("MTU %d, want %d", vx.MTU, 1400-felix.VXLANOverhead)
		case vx.HardwareAddr.String() != felix.VXLANMAC("node-a").String() || vx.Flags&net.FlagUp == 0:
			return fmt.Sprintf("mac %s flags %v", vx.HardwareAddr, vx.Flags)
		case len(arp) != 2 || arp["10.244.2.0"] != macB || arp["10.244.3.0"] != macC:
			return fmt.Sprintf("ARP %v", arp)
		case len(fdb) != 2 || fdb["192.0.2.2"] != macB || fdb["198.51.100.3"] != macC:
			return fmt.Sprintf("FDB %v", fdb)
		}
		return ""
	})
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
