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
	for _, r := range []api.Resource{
		vx,
		vtepNode("a", "192.0.2.1/24", "10.5.0.0"),
		vtepNode("same", "192.0.2.2/24", "10.5.1.0"),
		vtepNode("far", "198.51.100.3/24", "10.5.2.0"),
		testNode("new", "198.51.100.4/24", "", nil), // no VTEP yet
	} {
		s.setResource("a", r)
	}
	for _, a := range []BlockAffinity{
		{"same", pfx("10.5.1.0/26"), AffinityConfirmed},
		{"far", pfx("10.5.2.0/26"), AffinityConfirmed},
		{"new", pfx("10.5.4.0/26"), AffinityConfirmed},
	} {
		s.affinities[affKey{a.Node, a.CIDR}] = a
	}
	s.borrowed[pfx("10.5.1.0/26")] = map[netip.Addr]string{addr("10.5.1.9"): "far"}

	p := computePlan(cfg, s)
	if !p.vxlan || p.vxlanAddr != addr("10.5.0.0") || p.vxlanMAC != VXLANMAC("a").String() || len(p.vteps) != 2 {
		t.Fatalf("vxlan=%v addr=%v mac=%s vteps=%v, want this node's VTEP and 2 remote ones", p.vxlan, p.vxlanAddr, p.vxlanMAC, p.vteps)
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
	if p := computePlan(cfg, s); p.vxlan || len(p.vteps) != 0 || p.routes[pfx("10.5.2.0/26")].Iface == VXLANDevice {
		t.Errorf("pool not selecting this node: vxlan=%v vteps=%d route %+v", p.vxlan, len(p.vteps), p.routes[pfx("10.5.2.0/26")])
	}
}
