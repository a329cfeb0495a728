// Package tunneladdr gives this node its IPIP and VXLAN tunnel addresses
// (and VTEP MAC) from the pools that select it, and records them on its
// Node, as Calico's node does.
package tunneladdr

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
)

// VXLANTunnelHandle is the IPAM handle of a node's VXLAN tunnel address
// (its VTEP), as Calico names it.
func VXLANTunnelHandle(node string) string { return "vxlan-tunnel-addr-" + node }

// VXLANV6TunnelHandle is the IPAM handle of a node's IPv6 VXLAN tunnel
// address, as Calico names it.
func VXLANV6TunnelHandle(node string) string { return "vxlan-v6-tunnel-addr-" + node }

// encapPoolsFor returns the enabled pools of one family (4 or 6)
// selecting the node whose encapsulation mode (picked by mode) is not
// Never.
func encapPoolsFor(pools []*api.IPPool, node *api.Node, family int, mode func(*api.IPPool) string) []string {
	var names []string
	for _, p := range pools {
		if m := mode(p); p.Spec.Disabled || m == api.EncapNever || m == "" || p.IsIPv6() != (family == 6) {
			continue
		}
		if ok, err := kernel.PoolSelectsNode(p.Spec.NodeSelector, node.Metadata.Labels); err != nil || !ok {
			continue
		}
		names = append(names, p.Metadata.Name)
	}
	return names
}

// tunnelAddr allocates the handle's address from pools, or releases it
// when pools is empty, and returns the address ("" when released).
func tunnelAddr(ctx context.Context, ic *ipam.Client, node, handle string, family int, pools []string) (string, error) {
	if len(pools) == 0 {
		_, err := ic.ReleaseByHandle(ctx, handle)
		return "", err
	}
	addrs, err := ic.AutoAssign(ctx, ipam.AssignArgs{
		Node: node, HandleID: handle, Num: 1, Pools: pools, Family: family,
		Attrs: ipam.Attributes{Type: ipam.TypeTunnel},
	})
	if err != nil {
		return "", fmt.Errorf("tunnel address for %q: %w", node, err)
	}
	return addrs[0].String(), nil
}

// EnsureTunnelAddress gives the node an IPIP tunnel address from an IPIP
// pool that selects it, a VXLAN tunnel address (and MAC) from an IPv4
// VXLAN pool that selects it and, when the node has an IPv6 address (the
// IPv6 tunnel runs over it), an IPv6 VXLAN tunnel address (and MAC) from
// an IPv6 VXLAN pool that selects it, and records them on the Node; when
// no pool of a kind applies it releases that address and clears the
// fields.
// Idempotent: the tunnel handles make a repeat allocation return the
// same address, and the MAC is derived from the node name.
func EnsureTunnelAddress(ctx context.Context, ds *datastore.Client, ic *ipam.Client, name string) error {
	for i := 0; i < writeRetries; i++ {
		r, err := ds.Get(ctx, api.KindNode, name)
		if err != nil {
			return err
		}
		node := r.(*api.Node)
		if node.Spec.BGP == nil {
			return fmt.Errorf("tunnel address: node %q has no BGP address yet", name)
		}
		list, _, err := ds.List(ctx, api.KindIPPool)
		if err != nil {
			return err
		}
		pools := make([]*api.IPPool, 0, len(list))
		for _, r := range list {
			pools = append(pools, r.(*api.IPPool))
		}
		var ipip, vxlan, vxlan6 string
		ipipMode := func(p *api.IPPool) string { return p.Spec.IPIPMode }
		vxlanMode := func(p *api.IPPool) string { return p.Spec.VXLANMode }
		var v6pools []string
		if _, ok := node.Address6(); ok {
			v6pools = encapPoolsFor(pools, node, 6, vxlanMode)
		}
		kinds := []struct {
			handle string
			family int
			pools  []string
			addr   *string
		}{
			{ipam.TunnelHandle(name), 4, encapPoolsFor(pools, node, 4, ipipMode), &ipip},
			{VXLANTunnelHandle(name), 4, encapPoolsFor(pools, node, 4, vxlanMode), &vxlan},
			{VXLANV6TunnelHandle(name), 6, v6pools, &vxlan6},
		}
		// Releases first, so a pool switching encapsulation can hand the
		// released address straight to the other tunnel.
		sort.SliceStable(kinds, func(i, j int) bool { return len(kinds[i].pools) == 0 && len(kinds[j].pools) > 0 })
		for _, k := range kinds {
			if *k.addr, err = tunnelAddr(ctx, ic, name, k.handle, k.family, k.pools); err != nil {
				return err
			}
		}
		mac, mac6 := "", ""
		if vxlan != "" {
			mac = felix.VXLANMAC(name).String()
		}
		if vxlan6 != "" {
			mac6 = felix.VXLANMACV6(name).String()
		}
		s := &node.Spec
		if s.BGP.IPv4IPIPTunnelAddr == ipip && s.IPv4VXLANTunnelAddr == vxlan && s.VXLANTunnelMACAddr == mac &&
			s.IPv6VXLANTunnelAddr == vxlan6 && s.VXLANTunnelMACAddrV6 == mac6 {
			return nil
		}
		s.BGP.IPv4IPIPTunnelAddr, s.IPv4VXLANTunnelAddr, s.VXLANTunnelMACAddr = ipip, vxlan, mac
		s.IPv6VXLANTunnelAddr, s.VXLANTunnelMACAddrV6 = vxlan6, mac6
		_, err = ds.Update(ctx, node)
		if errors.Is(err, datastore.ErrConflict) {
			continue
		}
		if err == nil {
			log.WithFields(map[string]any{"ipipTunnelAddr": ipip, "vxlanTunnelAddr": vxlan, "vxlanMAC": mac,
				"vxlanTunnelAddrV6": vxlan6, "vxlanMACV6": mac6}).Info("tunnel addresses updated")
		}
		return err
	}
	return fmt.Errorf("tunnel address for %q: %w", name, datastore.ErrConflict)
}
