package felix

import (
	"maps"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/wireguard"
)

// Every node's WireGuard device carries an address from the pools (its
// Node's spec.wireguard, allocated by routed/tunneladdr while the node
// publishes a key). Routes through the device use this node's as their
// source, and the other nodes' are among their peers' allowed IPs and
// routed through the device, so a packet this node's host sends a
// remote pod comes back, and passes the remote node's reverse-path
// check, through the devices: the remote node routes the source through
// its own device, not its uplink (wireguard_rpfilter.go).

// wgOwnAddr is the address family fam's device should carry: this
// node's from its Node, when it lies in a pool (as the allocation
// does) and IPAM holds it for this node and no local pod has it
// (wireguard_ipam.go); invalid: none. An address IPAM no longer backs
// thus leaves the device at the next apply.
func (l *loop) wgOwnAddr(fam int) netip.Addr {
	n := l.st.nodes[l.cfg.NodeName]
	if n == nil {
		return netip.Addr{}
	}
	a, ok := n.WireguardAddress(fam == wg6)
	if !ok || !inPools(l.st.sortedPools(), netip.PrefixFrom(a, a.BitLen())) {
		return netip.Addr{}
	}
	if newTunnelAddrCheck(l.cfg.NodeName, l.st).refusal(l.cfg.NodeName, wgAddrWhat, a) != "" {
		return netip.Addr{} // logged from the plan (logRefused)
	}
	return a
}

// wgAddrWhat names a WireGuard device address in refusals.
const wgAddrWhat = "WireGuard device address"

// syncWGAddr puts the wanted address on family fam's device (link, made
// and configured) and records what it carries; on an error it records
// none, so no route asks for a source the device may lack.
func (l *loop) syncWGAddr(fam int, link netlink.Link) error {
	w := l.f.wg
	want := l.wgOwnAddr(fam)
	family := 4
	if fam == wg6 {
		family = 6
	}
	if err := wireguard.SetAddress(l.h, link, family, want); err != nil {
		w.addr[fam] = netip.Addr{}
		return err
	}
	w.addr[fam] = want
	return nil
}

// routeWGAddrs routes every other node's device address through the
// device as its blocks are (held when they are held), which also puts
// it among the peer's allowed IPs. An address IPAM does not hold for
// its node (c) is neither routed, held nor allowed; it is recorded in
// refused, this node's too (wgOwnAddr keeps it off the device).
func (p *plan) routeWGAddrs(cfg *Config, s *state, pools []*pool, c *tunnelAddrCheck) {
	for _, name := range slices.Sorted(maps.Keys(s.nodes)) {
		for fam := range p.wg {
			a, ok := s.nodes[name].WireguardAddress(fam == wg6)
			if !ok || !p.wg[fam].on || !c.note(p.wg[fam].refused, name, wgAddrWhat, a) || name == cfg.NodeName {
				continue
			}
			dst := netip.PrefixFrom(a, a.BitLen())
			if r, ok := p.wgRoute(pools, dst, netip.Addr{}, name); ok {
				p.routes[dst] = r
			}
		}
	}
}
