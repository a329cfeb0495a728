package felix

import (
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

// forgedVXLANCase is one family's forgery: node b claims an address in
// node c's block (a pod's) as its VXLAN tunnel address, node d claims
// c's own VTEP address; c's VTEP is in its block.
type forgedVXLANCase struct {
	fam                      vxlanFamily
	pool                     *api.IPPool
	blocks                   [3]netip.Prefix // b's, c's, e's
	forged, cVTEP, bLegit    netip.Addr
	lentToB                  netip.Addr // in e's block, lent by IPAM to b
	nodeB, nodeC, nodeD, own string     // node addresses (of the family)
}

func (tc forgedVXLANCase) node(name, address, vtep string) *api.Node {
	n := testNode(name, "192.0.2.1/24", "", nil)
	if tc.fam.v6 {
		n.Spec.BGP.IPv6Address = address
		n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6 = vtep, VXLANMACV6(name).String()
	} else {
		n.Spec.BGP.IPv4Address = address
		n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr = vtep, VXLANMAC(name).String()
	}
	return n
}

// TestComputePlanVXLANForgedTunnelAddress is the WireGuard forgery
// (TestComputePlanWireguardForgedDeviceAddress) on the VXLAN path, both
// families: node b's record claims an address in node c's block as its
// VXLAN tunnel address, node d's claims c's own VTEP address. Neither
// gets a VTEP (no ARP/NDP entry to the claimant's MAC, no route via the
// claimed address, no /32 or /128 for it), each is refused naming node
// and address; c's VTEP, in its block, still carries c's block; b's
// block goes directly to b's node address (b's VXLAN peering off, as
// for a node without a VTEP). b's legitimate claim (in its block), or
// an address IPAM lends to b, gives b its VTEP back.
func TestComputePlanVXLANForgedTunnelAddress(t *testing.T) {
	v4 := testPool("vx", "10.5.0.0/16", "Never", false, "all()")
	v4.Spec.VXLANMode = api.EncapAlways
	v6 := testPool("vx6", "fd00:5::/48", "Never", false, "all()")
	v6.Spec.BlockSize, v6.Spec.VXLANMode = 122, api.EncapAlways
	for _, tc := range []forgedVXLANCase{
		{fam: vxlanV4, pool: v4, blocks: [3]netip.Prefix{pfx("10.5.1.0/26"), pfx("10.5.2.0/26"), pfx("10.5.5.0/26")},
			forged: addr("10.5.2.7"), cVTEP: addr("10.5.2.0"), bLegit: addr("10.5.1.0"), lentToB: addr("10.5.5.9"),
			own: "192.0.2.1/24", nodeB: "198.51.100.2/24", nodeC: "198.51.100.3/24", nodeD: "198.51.100.4/24"},
		{fam: vxlanV6, pool: v6, blocks: [3]netip.Prefix{pfx("fd00:5::40/122"), pfx("fd00:5::80/122"), pfx("fd00:5::140/122")},
			forged: addr("fd00:5::87"), cVTEP: addr("fd00:5::80"), bLegit: addr("fd00:5::40"), lentToB: addr("fd00:5::149"),
			own: "fd00:10:1::1/64", nodeB: "fd00:10:2::2/64", nodeC: "fd00:10:2::3/64", nodeD: "fd00:10:2::4/64"},
	} {
		t.Run(tc.fam.device, func(t *testing.T) {
			cfg := &Config{NodeName: "a"}
			s := newState()
			s.seed([]api.Resource{
				tc.pool,
				tc.node("a", tc.own, ""),
				tc.node("b", tc.nodeB, tc.forged.String()), // a pod address in c's block
				tc.node("c", tc.nodeC, tc.cVTEP.String()),  // legit
				tc.node("d", tc.nodeD, tc.cVTEP.String()),  // c's VTEP address
			}, []BlockAffinity{
				{"b", tc.blocks[0], AffinityConfirmed},
				{"c", tc.blocks[1], AffinityConfirmed},
				{"e", tc.blocks[2], AffinityConfirmed},
			})
			s.borrowed[tc.blocks[2]] = map[netip.Addr]string{tc.lentToB: "b"}
			nodeAddr := func(a string) netip.Addr { return pfx(a).Addr() }
			onlink := func(dst netip.Prefix, gw netip.Addr) routetable.Route {
				return routetable.Route{Dst: dst, Iface: tc.fam.device, Gw: gw, OnLink: true}
			}

			p := computePlan(cfg, s)
			v := p.vxlanFor(tc.forged)
			if !v.on {
				t.Fatalf("%s off", tc.fam.device)
			}
			if len(v.vteps) != 1 || v.vteps[nodeAddr(tc.nodeC)].addr != tc.cVTEP || v.vteps[nodeAddr(tc.nodeC)].node != "c" {
				t.Errorf("VTEPs %+v, want only c's %s", v.vteps, tc.cVTEP)
			}
			for _, key := range []string{"b " + tc.forged.String(), "d " + tc.cVTEP.String()} {
				if v.refused[key] == "" {
					t.Errorf("%s not refused: %v", key, v.refused)
				}
			}
			if len(v.refused) != 2 {
				t.Errorf("refused %v, want the two forged claims", v.refused)
			}
			if r, ok := p.routes[netip.PrefixFrom(tc.forged, tc.forged.BitLen())]; ok {
				t.Errorf("forged %s is routed: %+v", tc.forged, r)
			}
			for dst, r := range p.routes {
				if r.Iface == tc.fam.device && r.Gw == tc.forged {
					t.Errorf("%s routed via the forged VTEP: %+v", dst, r)
				}
			}
			want := map[netip.Prefix]routetable.Route{
				tc.blocks[1]: onlink(tc.blocks[1], tc.cVTEP),
				tc.blocks[0]: {Dst: tc.blocks[0], Gw: nodeAddr(tc.nodeB)}, // b's peering off: direct
			}
			for dst, w := range want {
				if got := p.routes[dst]; got != w {
					t.Errorf("%s = %+v, want %+v", dst, got, w)
				}
			}

			// b's legitimate claim, then one IPAM lends it: a VTEP again.
			for _, legit := range []netip.Addr{tc.bLegit, tc.lentToB} {
				b := tc.node("b", tc.nodeB, legit.String())
				s.setResource("a", b)
				p := computePlan(cfg, s)
				v := p.vxlanFor(legit)
				if got := v.vteps[nodeAddr(tc.nodeB)]; got.addr != legit || got.node != "b" {
					t.Errorf("b's claim %s: VTEP %+v", legit, got)
				}
				if got, w := p.routes[tc.blocks[0]], onlink(tc.blocks[0], legit); got != w {
					t.Errorf("b's claim %s: %s = %+v, want %+v", legit, tc.blocks[0], got, w)
				}
				if len(v.refused) != 1 || v.refused["d "+tc.cVTEP.String()] == "" {
					t.Errorf("b's claim %s: refused %v, want only d's", legit, v.refused)
				}
			}
		})
	}
}

// TestVXLANRefusedLoggedOnce: a refused VXLAN tunnel address is logged
// once naming node and address, a refusal alone makes the device's
// plan count as changed (so it is applied and logged), and its end is
// logged once.
func TestVXLANRefusedLoggedOnce(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	dev := &vxlanDev{log: logrus.NewEntry(logger), fam: vxlanV4}
	refused := map[string]string{"b 10.5.2.7": "VXLAN tunnel address 10.5.2.7 is in none of the node's IPAM blocks and not lent to it"}

	old, cur := &plan{}, &plan{}
	old.vxlan.on, cur.vxlan.on = true, true
	cur.vxlan.refused = refused
	if !vxlanChanged(old, cur) {
		t.Error("a new refusal alone does not count as a VXLAN change")
	}
	for range 3 {
		dev.logRefused(refused)
	}
	warns := 0
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel {
			warns++
			if e.Data["node"] != "b" || e.Data["device"] != VXLANDevice {
				t.Errorf("warning fields %v, want node b on %s", e.Data, VXLANDevice)
			}
		}
	}
	if warns != 1 || len(hook.AllEntries()) != 1 {
		t.Errorf("%d warnings, %d entries for one refusal seen 3 times, want 1", warns, len(hook.AllEntries()))
	}
	hook.Reset()
	dev.logRefused(nil)
	dev.logRefused(nil)
	if e := hook.AllEntries(); len(e) != 1 || e[0].Level != logrus.InfoLevel {
		t.Errorf("end of refusal logged %d times, want once at info: %v", len(e), e)
	}
}
