package felix

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
)

// TestComputePlanVXLAN: with no BGP-learned routes at all, a VXLAN
// CrossSubnet pool routes a cross-subnet block via the remote VTEP on
// vxlan.routed (onlink), a same-subnet block directly, an address another
// node borrowed from a third node's block as a /32 to the borrower, and
// skips a node whose VTEP is not known yet (direct, like plain routing).
func TestComputePlanVXLAN(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	vx := testPool("vx", "10.5.0.0/16", "Never", false, "all()")
	vx.Spec.VXLANMode = api.EncapCrossSubnet
	vtepNode := func(name, address, vtep string) *api.Node {
		n := testNode(name, address, "", nil)
		n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr = vtep, VXLANMAC(name).String()
		return n
	}
	s.seed([]api.Resource{
		vx,
		vtepNode("a", "192.0.2.1/24", "10.5.0.0"),
		vtepNode("same", "192.0.2.2/24", "10.5.1.0"),
		vtepNode("far", "198.51.100.3/24", "10.5.2.0"),
		testNode("new", "198.51.100.4/24", "", nil), // no VTEP yet
	}, []BlockAffinity{
		{"same", pfx("10.5.1.0/26"), AffinityConfirmed},
		{"far", pfx("10.5.2.0/26"), AffinityConfirmed},
		{"new", pfx("10.5.4.0/26"), AffinityConfirmed},
	})
	s.borrowed[pfx("10.5.1.0/26")] = map[netip.Addr]string{addr("10.5.1.9"): "far"}

	p := computePlan(cfg, s)
	if v := p.vxlan; !v.on || v.addr != addr("10.5.0.0") || v.mac != VXLANMAC("a").String() || len(v.vteps) != 2 {
		t.Fatalf("vxlan=%v addr=%v mac=%s vteps=%v, want this node's VTEP and 2 remote ones", v.on, v.addr, v.mac, v.vteps)
	}
	want := map[string]routetable.Route{
		"10.5.1.0/26": {Dst: pfx("10.5.1.0/26"), Gw: addr("192.0.2.2")},
		"10.5.2.0/26": {Dst: pfx("10.5.2.0/26"), Iface: VXLANDevice, Gw: addr("10.5.2.0"), OnLink: true},
		"10.5.1.9/32": {Dst: pfx("10.5.1.9/32"), Iface: VXLANDevice, Gw: addr("10.5.2.0"), OnLink: true},
		"10.5.4.0/26": {Dst: pfx("10.5.4.0/26"), Gw: addr("198.51.100.4")},
	}
	for dst, w := range want {
		if got := p.routes[pfx(dst)]; got != w {
			t.Errorf("%s: got %+v, want %+v", dst, got, w)
		}
	}
	// Not selected by any VXLAN pool: no device, no VTEPs, plain routes.
	vx.Spec.NodeSelector = "!all()"
	s.setResource("a", vx)
	if p := computePlan(cfg, s); p.vxlan.on || len(p.vxlan.vteps) != 0 || p.routes[pfx("10.5.2.0/26")].Iface == VXLANDevice {
		t.Errorf("pool not selecting this node: vxlan=%v vteps=%d route %+v", p.vxlan.on, len(p.vxlan.vteps), p.routes[pfx("10.5.2.0/26")])
	}
}

// TestComputePlanVXLANv6: an IPv6 VXLAN CrossSubnet pool next to a
// native IPv4 pool: IPv6 blocks of nodes on another IPv6 subnet go via
// their IPv6 VTEP on vxlan-v6.routed (onlink), same-subnet ones directly,
// a borrowed IPv6 address as a /128 to the borrower; the IPv4 pool stays
// native and vxlan.routed off. Without an IPv6 address of its own the
// node has no IPv6 tunnel to run (plain routes).
func TestComputePlanVXLANv6(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	vx := testPool("vx6", "fd00:5::/48", "Never", false, "all()")
	vx.Spec.BlockSize, vx.Spec.VXLANMode = 122, api.EncapCrossSubnet
	vtepNode := func(name, address, address6, vtep6 string) *api.Node {
		n := testNode(name, address, "", nil)
		n.Spec.BGP.IPv6Address = address6
		n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6 = vtep6, VXLANMACV6(name).String()
		return n
	}
	s.seed([]api.Resource{
		vx, testPool("v4", "10.5.0.0/16", "Never", false, "all()"),
		vtepNode("a", "192.0.2.1/24", "fd00:10:1::1/64", "fd00:5::"),
		vtepNode("same", "192.0.2.2/24", "fd00:10:1::2/64", "fd00:5::40"),
		vtepNode("far", "198.51.100.3/24", "fd00:10:2::3/64", "fd00:5::80"),
	}, []BlockAffinity{
		{"same", pfx("fd00:5::40/122"), AffinityConfirmed},
		{"far", pfx("fd00:5::80/122"), AffinityConfirmed},
		{"far", pfx("10.5.2.0/26"), AffinityConfirmed},
	})
	s.borrowed[pfx("fd00:5::40/122")] = map[netip.Addr]string{addr("fd00:5::49"): "far"}

	p := computePlan(cfg, s)
	if v := p.vxlan6; !v.on || v.addr != addr("fd00:5::") || v.mac != VXLANMACV6("a").String() || len(v.vteps) != 2 || p.vxlan.on {
		t.Fatalf("vxlan6=%v addr=%v mac=%s vteps=%v vxlan(v4)=%v, want this node's IPv6 VTEP, 2 remote ones, no IPv4 device", v.on, v.addr, v.mac, v.vteps, p.vxlan.on)
	}
	want := map[string]routetable.Route{
		"fd00:5::40/122": {Dst: pfx("fd00:5::40/122"), Gw: addr("fd00:10:1::2")},
		"fd00:5::80/122": {Dst: pfx("fd00:5::80/122"), Iface: VXLANDeviceV6, Gw: addr("fd00:5::80"), OnLink: true},
		"fd00:5::49/128": {Dst: pfx("fd00:5::49/128"), Iface: VXLANDeviceV6, Gw: addr("fd00:5::80"), OnLink: true},
		"10.5.2.0/26":    {Dst: pfx("10.5.2.0/26"), Gw: addr("198.51.100.3")},
	}
	for dst, w := range want {
		if got := p.routes[pfx(dst)]; got != w {
			t.Errorf("%s: got %+v, want %+v", dst, got, w)
		}
	}
	// A node without an IPv6 address runs no IPv6 tunnel.
	s.setResource("a", vtepNode("a", "192.0.2.1/24", "", ""))
	if p := computePlan(cfg, s); p.vxlan6.on || p.routes[pfx("fd00:5::80/122")].Iface == VXLANDeviceV6 {
		t.Errorf("node without IPv6 address: vxlan6=%v route %+v", p.vxlan6.on, p.routes[pfx("fd00:5::80/122")])
	}
}
