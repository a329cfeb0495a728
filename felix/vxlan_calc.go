package felix

import (
	"net"
	"net/netip"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
)

// VXLAN device settings, as Calico's vxlan.calico and vxlan-v6.calico
// (VNI 4096, IANA port; the kernel tells the two apart by the family of
// their local address).
const (
	VXLANDevice   = "vxlan.routed"
	VXLANDeviceV6 = "vxlan-v6.routed"
	VXLANVNI      = 4096
	VXLANPort     = 4789
	VXLANOverhead = 50
	// VXLANOverheadV6 is the IPv6 underlay's: a 40-byte IPv6 header
	// where IPv4's is 20.
	VXLANOverheadV6 = 70
)

// vxlanFamily is what differs between the IPv4 and the IPv6 VXLAN
// device: the family of the pods' addresses is the family of the
// underlay (the nodes' addresses) too, as in Calico.
type vxlanFamily struct {
	v6       bool
	device   string
	overhead int
}

var (
	vxlanV4 = vxlanFamily{device: VXLANDevice, overhead: VXLANOverhead}
	vxlanV6 = vxlanFamily{v6: true, device: VXLANDeviceV6, overhead: VXLANOverheadV6}
)

// vxlanPlan is one family's VXLAN device as felix wants it.
type vxlanPlan struct {
	// on is true when a VXLAN pool of the family selects this node (and,
	// for IPv6, the node has an IPv6 address to run the tunnel over).
	on   bool
	addr netip.Addr // the device's own address (the node's VTEP)
	mac  string
	// vteps are the remote nodes it reaches, by node address.
	vteps map[netip.Addr]vtep
	// refused are the VXLAN tunnel addresses other nodes' records claim
	// that IPAM does not hold for them (wireguard_ipam.go), keyed "node
	// address", with the reason: they get no VTEP.
	refused map[string]string
}

// vtep is a remote node's VXLAN tunnel endpoint: its device address and
// MAC, reached through the node's own address.
type vtep struct {
	node     string
	nodeAddr netip.Addr
	addr     netip.Addr
	mac      net.HardwareAddr
}

// VXLANMAC is the MAC of a node's VXLAN device (api.VXLANMAC).
func VXLANMAC(node string) net.HardwareAddr { return api.VXLANMAC(node) }

// VXLANMACV6 is the MAC of a node's IPv6 VXLAN device (api.VXLANMACV6).
func VXLANMACV6(node string) net.HardwareAddr { return api.VXLANMACV6(node) }

// nodeVTEP is a Node's VTEP address and MAC of one family, as recorded
// by its tunnel addressing.
func nodeVTEP(n *api.Node, fam vxlanFamily) (string, string) {
	if fam.v6 {
		return n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6
	}
	return n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr
}

// remoteVTEPs lists every other node that has a VXLAN address, MAC and
// node address of the family, by node address. A node's VXLAN address
// is a claim its writer makes (the routed-rr identity may write its own
// Node record): it becomes the on-link gateway of the routes to the
// node's blocks and a permanent ARP/NDP entry to the node's MAC, so a
// claim of another node's address (its VTEP, or a pod's) would pull
// that traffic to the claimant. It counts only where IPAM holds it for
// the node, as for WireGuard (tunnelAddrCheck); a refused claim leaves
// the node without a VTEP (its blocks are routed as for a node whose
// VTEP is not known yet: directly) and is returned in refused, keyed
// "node address", for logging once.
func remoteVTEPs(local string, s *state, fam vxlanFamily) (map[netip.Addr]vtep, map[string]string) {
	out, refused := map[netip.Addr]vtep{}, map[string]string{}
	c := newTunnelAddrCheck(local, s)
	for name, n := range s.nodes {
		if name == local {
			continue
		}
		na, ok := s.nodeAddr(name)
		if fam.v6 {
			na, ok = s.nodeAddr6(name)
		}
		if !ok {
			continue
		}
		a, m := nodeVTEP(n, fam)
		addr, err := netip.ParseAddr(a)
		if err != nil || addr.Is6() != fam.v6 || addr.Is4In6() {
			continue
		}
		mac, err := net.ParseMAC(m)
		if err != nil || len(mac) != 6 {
			continue
		}
		if !c.note(refused, name, "VXLAN tunnel address", addr) {
			continue
		}
		out[na.Addr()] = vtep{node: name, nodeAddr: na.Addr(), addr: addr, mac: mac}
	}
	return out, refused
}

// borrowedVXLANRoutes routes each address another node borrowed from a
// block in a VXLAN pool to that node (a /32 or /128, more specific than
// the block's route). This node's own borrowed addresses are pod routes.
func borrowedVXLANRoutes(cfg *Config, s *state, pools []*pool, p *plan) []routetable.Route {
	var out []routetable.Route
	for block, addrs := range s.borrowed {
		if !p.vxlanFor(block.Addr()).on || !vxlanPool(pools, block) {
			continue
		}
		for a, node := range addrs {
			if node == cfg.NodeName || a.Is4() != block.Addr().Is4() {
				continue
			}
			nh, ok := s.nodeAddrFor(node, a)
			if !ok {
				continue
			}
			if r, ok := routeVia(cfg, pools, p.local(a), netip.PrefixFrom(a, a.BitLen()), nh.Addr(), s.gateway, p.vxlanFor(a).vteps); ok {
				out = append(out, r)
			}
		}
	}
	return out
}

// vxlanPool reports whether the most specific pool holding block uses VXLAN.
func vxlanPool(pools []*pool, block netip.Prefix) bool {
	for _, pl := range pools {
		if pl.cidr.Contains(block.Addr()) && pl.cidr.Bits() <= block.Bits() {
			return pl.vxlan != "" && pl.vxlan != "Never"
		}
	}
	return false
}
