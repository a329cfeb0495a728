package felix

import (
	"net"
	"net/netip"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
)

// VXLAN device settings, as Calico's vxlan.calico (VNI 4096, IANA port).
const (
	VXLANDevice   = "vxlan.routed"
	VXLANVNI      = 4096
	VXLANPort     = 4789
	VXLANOverhead = 50
)

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

// remoteVTEPs lists every other node that has a VXLAN address, MAC and
// node address, by node address.
func remoteVTEPs(local string, s *state) map[netip.Addr]vtep {
	out := map[netip.Addr]vtep{}
	for name, n := range s.nodes {
		if name == local {
			continue
		}
		na, ok := s.nodeAddr(name)
		if !ok {
			continue
		}
		addr, err := netip.ParseAddr(n.Spec.IPv4VXLANTunnelAddr)
		if err != nil || !addr.Is4() {
			continue
		}
		mac, err := net.ParseMAC(n.Spec.VXLANTunnelMACAddr)
		if err != nil || len(mac) != 6 {
			continue
		}
		out[na.Addr()] = vtep{node: name, nodeAddr: na.Addr(), addr: addr, mac: mac}
	}
	return out
}

// borrowedVXLANRoutes routes each address another node borrowed from a
// block in a VXLAN pool to that node (a /32, more specific than the
// block's route). This node's own borrowed addresses are pod routes.
func borrowedVXLANRoutes(cfg *Config, s *state, pools []*pool, p *plan) []routetable.Route {
	if !p.vxlan {
		return nil
	}
	var out []routetable.Route
	for block, addrs := range s.borrowed {
		if !vxlanPool(pools, block) {
			continue
		}
		for a, node := range addrs {
			if node == cfg.NodeName || !a.Is4() {
				continue
			}
			nh, ok := s.nodeAddr(node)
			if !ok {
				continue
			}
			if r, ok := routeVia(cfg, pools, p.nodeAddr, netip.PrefixFrom(a, 32), nh.Addr(), s.gateway, p.vteps); ok {
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
