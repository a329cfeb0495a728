package felix

import (
	"net/netip"
	"sort"

	"github.com/routed-net/routed/felix/routetable"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// plan is what the dataplane should look like, computed from state.
type plan struct {
	routes map[netip.Prefix]routetable.Route
	// ipip is true when an IPIP pool selects this node: tunl0 is then
	// configured with tunnelAddr.
	ipip       bool
	tunnelAddr netip.Addr
	nodeAddr   netip.Prefix // invalid when unknown
	// nodeAddr6 is this node's IPv6 address (invalid when unknown): the
	// subnet that tells on-link IPv6 next hops from remote ones.
	nodeAddr6 netip.Prefix
	// ipv6 is true when an IPv6 pool exists: the IPv6 sysctls are then
	// set (sysctl.go).
	ipv6 bool
	// vxlan is vxlan.routed (IPv4 pools over the nodes' IPv4
	// addresses), vxlan6 vxlan-v6.routed (IPv6 pools over their IPv6
	// addresses); vxlan.go.
	vxlan, vxlan6 vxlanPlan
	allPools      []netip.Prefix
	natPools      []netip.Prefix
	// rejected lists the learned routes the import guard refused.
	rejected map[netip.Prefix]*rejection
	// badIfaces names endpoints whose interface is not a pod device.
	badIfaces []string
	// wg are the WireGuard devices, IPv4 and IPv6 (wireguard.go).
	wg [2]wgPlan
}

// computePlan derives the wanted dataplane. Route precedence for one
// prefix: a local pod, then a local block's blackhole, then a remote
// block from IPAM, then a route to a peer with reachableBy, then a
// BGP-learned path. With WireGuard on, pod prefixes of other nodes go
// through its device instead of their next hop or tunnel (wgRoute).
func computePlan(cfg *Config, s *state) *plan {
	p := &plan{routes: map[netip.Prefix]routetable.Route{}, rejected: map[netip.Prefix]*rejection{}}
	pools := s.sortedPools()
	local := s.nodes[cfg.NodeName]
	var labels map[string]string
	if local != nil {
		labels = local.Metadata.Labels
		p.nodeAddr, _ = s.nodeAddr(cfg.NodeName)
		p.nodeAddr6, _ = s.nodeAddr6(cfg.NodeName)
		if local.Spec.BGP != nil {
			p.tunnelAddr, _ = netip.ParseAddr(local.Spec.BGP.IPv4IPIPTunnelAddr)
		}
		p.vxlan.addr, _ = netip.ParseAddr(local.Spec.IPv4VXLANTunnelAddr)
		p.vxlan.mac = local.Spec.VXLANTunnelMACAddr
		p.vxlan6.addr, _ = netip.ParseAddr(local.Spec.IPv6VXLANTunnelAddr)
		p.vxlan6.mac = local.Spec.VXLANTunnelMACAddrV6
	}
	for _, pl := range pools {
		p.allPools = append(p.allPools, pl.cidr)
		p.ipv6 = p.ipv6 || pl.cidr.Addr().Is6()
		if pl.nat {
			p.natPools = append(p.natPools, pl.cidr)
		}
		if pl.ipip != "" && pl.ipip != "Never" && local != nil && pl.nodes.SelectsNode(labels) {
			p.ipip = true
		}
		if pl.vxlan != "" && pl.vxlan != "Never" && local != nil && pl.nodes.SelectsNode(labels) {
			p.vxlanFor(pl.cidr.Addr()).on = true
		}
	}
	// The IPv6 tunnel runs between the nodes' IPv6 addresses.
	p.vxlan6.on = p.vxlan6.on && p.nodeAddr6.IsValid()
	if p.vxlan.on {
		p.vxlan.vteps, p.vxlan.refused = remoteVTEPs(cfg.NodeName, s, vxlanV4)
	}
	if p.vxlan6.on {
		p.vxlan6.vteps, p.vxlan6.refused = remoteVTEPs(cfg.NodeName, s, vxlanV6)
	}
	if cfg.Features.DisableIPIP {
		p.ipip = false
	}
	p.initWireguard(cfg, s, pools)
	var owners map[netip.Prefix]string
	if p.wg[wg4].on || p.wg[wg6].on {
		owners = ipamOwners(s)
	}

	// Lowest precedence first; later writes win. Learned routes pass the
	// import guard first (guard.go).
	g := newGuard(cfg, s, pools)
	for dst, lr := range s.learned {
		if rej := g.check(dst, lr); rej != nil {
			p.rejected[dst] = rej
			continue
		}
		// Through WireGuard, to the node IPAM gives the block or the
		// borrowed address when it does: not to whichever node's
		// address a route names as its next hop. An address IPAM lends
		// this node is a local pod's: its own route, not another node
		// (until the pod is there, its block's route covers it).
		owner := owners[dst]
		if owner == cfg.NodeName && p.wg[wgFam(dst.Addr())].on {
			continue
		}
		if r, ok := p.wgRoute(pools, dst, lr.nextHop, owner); ok {
			p.routes[dst] = r
			continue
		}
		if r, ok := routeVia(cfg, pools, p.local(dst.Addr()), dst, lr.nextHop, s.gateway, p.vxlanFor(dst.Addr()).vteps); ok {
			r.Metric = routeMetric(dst, lr.priority)
			p.routes[dst] = r
		}
	}
	// A peer's reachableBy route beats what BGP says about its address
	// (BIRD's static protocol has the higher preference). The gateway
	// must be on a local subnet, as for BIRD's "via": the kernel refuses
	// others, and the route table retries.
	for peer, gw := range s.peerRoutes {
		dst := netip.PrefixFrom(peer, peer.BitLen())
		if peer.Is4() == gw.Is4() && (!p.local(peer).IsValid() || peer != p.local(peer).Addr()) {
			p.routes[dst] = routetable.Route{Dst: dst, Gw: gw}
			if _, learned := s.learned[dst]; learned && p.rejected[dst] == nil {
				p.rejected[dst] = &rejection{FilterReachableBy, "BGP peer " + peer.String() + " is routed through its reachableBy gateway " + gw.String()}
			}
		}
	}
	var holes []netip.Prefix
	for _, a := range sortedAffinities(s) {
		if a.State != AffinityConfirmed || !a.CIDR.IsValid() {
			continue
		}
		if a.Node == cfg.NodeName {
			holes = append(holes, a.CIDR.Masked())
			continue
		}
		if r, ok := p.wgRoute(pools, a.CIDR, netip.Addr{}, a.Node); ok {
			p.routes[r.Dst] = r
			continue
		}
		// A remote block is reached through its node's address of the
		// block's family: IPv6 blocks via the node's IPv6 address.
		if nh, ok := s.nodeAddrFor(a.Node, a.CIDR.Addr()); ok {
			if r, ok := routeVia(cfg, pools, p.local(a.CIDR.Addr()), a.CIDR, nh.Addr(), s.gateway, p.vxlanFor(a.CIDR.Addr()).vteps); ok {
				p.routes[a.CIDR] = r
			}
		}
	}
	// Without BGP nothing announces addresses borrowed from another
	// node's block: VXLAN routes them from IPAM, as it does blocks.
	for _, r := range borrowedVXLANRoutes(cfg, s, pools, p) {
		p.routes[r.Dst] = r
	}
	p.finishWireguard(cfg, s, pools)
	for _, h := range holes {
		p.routes[h] = routetable.Route{Dst: h, Type: routetable.Blackhole}
	}
	names := make([]string, 0, len(s.weps))
	for n := range s.weps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		w := s.weps[n]
		// Only pod devices: an endpoint naming eth0 or lo must not steer
		// a pod address to the host's own interfaces.
		if !kernel.IsHostDeviceName(w.Spec.InterfaceName) {
			p.badIfaces = append(p.badIfaces, n)
			continue
		}
		for _, cidr := range w.Spec.IPNetworks {
			pfx, err := netip.ParsePrefix(cidr)
			if err != nil || pfx.Addr().Is4In6() || pfx.Addr().Zone() != "" {
				continue
			}
			pfx = pfx.Masked()
			p.routes[pfx] = routetable.Route{Dst: pfx, Iface: w.Spec.InterfaceName}
		}
	}
	return p
}

// local is this node's address with prefix in the family of a.
func (p *plan) local(a netip.Addr) netip.Prefix {
	if a.Is4() {
		return p.nodeAddr
	}
	return p.nodeAddr6
}

// vxlanFor is the VXLAN device plan of a's family.
func (p *plan) vxlanFor(a netip.Addr) *vxlanPlan {
	if a.Is4() {
		return &p.vxlan
	}
	return &p.vxlan6
}

func sortedAffinities(s *state) []BlockAffinity {
	out := make([]BlockAffinity, 0, len(s.affinities))
	for _, a := range s.affinities {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		return out[i].CIDR.String() < out[j].CIDR.String()
	})
	return out
}

// routeVia is the route to dst through the node at nh: over tunl0
// (onlink) when dst's pool uses IPIP Always, or CrossSubnet and nh is
// outside this node's subnet; otherwise straight to nh on whichever
// device reaches it. A next hop on another subnet without IPIP is
// resolved recursively through gw (the router that reaches it), as BIRD's
// "gateway recursive" does: the kernel refuses a gateway it cannot reach
// directly, and that router must then know the pod routes (e.g. a ToR
// peering with the nodes).
//
// A pool with VXLAN goes over vxlan.routed to the VTEP of the node at nh
// (vteps, by node address) the same way; a node without a VTEP yet is
// reached directly.
//
// IPv6 works the same way with local the node's IPv6 address and
// vxlan-v6.routed, but is never IPIP. A link-local IPv6 gateway (an IPv6 router learned
// from router advertisements) comes from gw with its device as zone and
// is written "via fe80::1 dev eth0".
func routeVia(cfg *Config, pools []*pool, local netip.Prefix, dst netip.Prefix, nh netip.Addr, gw func(netip.Addr) netip.Addr, vteps map[netip.Addr]vtep) (routetable.Route, bool) {
	if !dst.IsValid() || dst.Addr().Is4() != nh.Is4() || (local.IsValid() && nh == local.Addr()) {
		return routetable.Route{}, false
	}
	dst = dst.Masked()
	direct := routetable.Route{Dst: dst, Gw: nh}
	if gw != nil && local.IsValid() && !local.Masked().Contains(nh) {
		if g := gw(nh); g.IsValid() && g.Is4() == nh.Is4() {
			direct.Gw, direct.Iface = g.WithZone(""), g.Zone()
		}
	}
	for _, pl := range pools {
		if !pl.cidr.Contains(dst.Addr()) || pl.cidr.Bits() > dst.Bits() {
			continue
		}
		if v, ok := vteps[nh]; ok && encapTo(pl.vxlan, local, nh) {
			dev := VXLANDevice
			if dst.Addr().Is6() {
				dev = VXLANDeviceV6
			}
			return routetable.Route{Dst: dst, Iface: dev, Gw: v.addr, OnLink: true}, true
		}
		if cfg.Features.DisableIPIP || dst.Addr().Is6() {
			return direct, true
		}
		// An unknown local subnet makes every peer look remote.
		if encapTo(pl.ipip, local, nh) {
			return routetable.Route{Dst: dst, Iface: TunnelDevice, Gw: nh, OnLink: true}, true
		}
		return direct, true
	}
	return direct, true
}

// routeMetric is the kernel metric of a learned route of the given route
// priority (a BGPFilter's setPriority, carried in LOCAL_PREF): the
// priority itself, as Calico's BIRD programs it, except that the default
// priority is the metric felix gives every route of dst's family (0 for
// IPv4; Route.Metric 0), so routes no filter touched stay where they
// always were.
func routeMetric(dst netip.Prefix, priority uint32) uint32 {
	if priority == api.DefaultRoutePriority || priority == routetable.DefaultMetric(dst) {
		return 0
	}
	return priority
}

// encapTo reports whether traffic to the node at nh is encapsulated in
// mode: always, or across subnets when nh is outside local's subnet. An
// unknown local subnet makes every peer look remote.
func encapTo(mode string, local netip.Prefix, nh netip.Addr) bool {
	return mode == "Always" || (mode == "CrossSubnet" && (!local.IsValid() || !local.Masked().Contains(nh)))
}
