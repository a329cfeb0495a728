package tunneladdr

import (
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/kernel"
)

// WireguardTunnelHandle is the IPAM handle of the address of a node's
// IPv4 WireGuard device, as Calico names it: never a pod's handle, nor
// the IPIP or VXLAN tunnels'.
func WireguardTunnelHandle(node string) string { return "wireguard-tunnel-addr-" + node }

// WireguardV6TunnelHandle is the same for the IPv6 device.
func WireguardV6TunnelHandle(node string) string { return "wireguard-v6-tunnel-addr-" + node }

// wireguardPoolsFor returns the enabled pools of one family (4 or 6)
// selecting the node while the node publishes a WireGuard key of that
// family (its felix runs the device), whatever their encapsulation:
// the device's address is what the node's host sends other nodes' pods
// from, so it must lie where they route back through their devices.
// A node without a key gets none, and loses the one it had (encryption
// turned off).
func wireguardPoolsFor(pools []*api.IPPool, node *api.Node, family int) []*api.IPPool {
	key := node.Status.WireguardPublicKey
	if family == 6 {
		key = node.Status.WireguardPublicKeyV6
	}
	if key == "" {
		return nil
	}
	var out []*api.IPPool
	for _, p := range pools {
		if p.Spec.Disabled || p.IsIPv6() != (family == 6) {
			continue
		}
		if ok, err := kernel.PoolSelectsNode(p.Spec.NodeSelector, node.Metadata.Labels); err != nil || !ok {
			continue
		}
		out = append(out, p)
	}
	return out
}

// wireguardTunnels are the node's WireGuard device addresses as tunnels
// to settle, recorded in n's spec.wireguard (a copy of the one n had,
// so the Node the feed delivered is never changed).
func wireguardTunnels(n *api.Node, pools []*api.IPPool) []tunnel {
	w := api.NodeWireguardSpec{}
	if n.Spec.Wireguard != nil {
		w = *n.Spec.Wireguard
	}
	n.Spec.Wireguard = &w
	name := n.Metadata.Name
	return []tunnel{
		{WireguardTunnelHandle(name), 4, wireguardPoolsFor(pools, n, 4), &w.InterfaceIPv4Address},
		{WireguardV6TunnelHandle(name), 6, wireguardPoolsFor(pools, n, 6), &w.InterfaceIPv6Address},
	}
}

// sameWireguard reports whether two spec.wireguard hold the same
// addresses (nil holds none).
func sameWireguard(a, b *api.NodeWireguardSpec) bool {
	var x, y api.NodeWireguardSpec
	if a != nil {
		x = *a
	}
	if b != nil {
		y = *b
	}
	return x == y
}

// wgAddr is the device address of a family, for logging.
func wgAddr(w *api.NodeWireguardSpec, v6 bool) string {
	switch {
	case w == nil:
		return ""
	case v6:
		return w.InterfaceIPv6Address
	}
	return w.InterfaceIPv4Address
}
