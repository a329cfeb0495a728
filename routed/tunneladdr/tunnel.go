// Package tunneladdr gives this node its IPIP and VXLAN tunnel addresses
// (and VTEP MAC), and its WireGuard devices' addresses while it
// publishes WireGuard keys, from the pools that select it, and records
// them on its Node, as Calico's node does.
//
// The Loop decides from the Node and pools the node feed delivered: it
// reads nothing from etcd on a wake. It writes the Node (conditional on
// the revision the feed delivered) and asks IPAM for an address only
// where one must come or go; IPAM's own compares read what they need.
// Only the first pass after a start, a retry after an error and the
// periodic re-check also confirm with IPAM that the handles hold the
// addresses the Node records.
package tunneladdr

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sort"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
)

// ErrNoNodeAddress means the node has no BGP address yet, so no tunnel
// can run over it; the node record keeper gives it one.
var ErrNoNodeAddress = errors.New("tunneladdr: node has no BGP address yet")

// Store is the datastore as tunneladdr uses it: it only replaces this
// node's Node, conditional on the revision it was read at.
type Store interface {
	Update(ctx context.Context, r api.Resource) (api.Resource, error)
}

// IPAM is what tunneladdr asks of IPAM: an address under a tunnel
// handle, or none.
type IPAM interface {
	AutoAssign(ctx context.Context, args ipam.AssignArgs) ([]netip.Addr, error)
	ReleaseByHandle(ctx context.Context, handle string) ([]netip.Addr, error)
}

// VXLANTunnelHandle is the IPAM handle of a node's VXLAN tunnel address
// (its VTEP), as Calico names it.
func VXLANTunnelHandle(node string) string { return "vxlan-tunnel-addr-" + node }

// VXLANV6TunnelHandle is the IPAM handle of a node's IPv6 VXLAN tunnel
// address, as Calico names it.
func VXLANV6TunnelHandle(node string) string { return "vxlan-v6-tunnel-addr-" + node }

// encapPoolsFor returns the enabled pools of one family (4 or 6)
// selecting the node whose encapsulation mode (picked by mode) is not
// Never.
func encapPoolsFor(pools []*api.IPPool, node *api.Node, family int, mode func(*api.IPPool) string) []*api.IPPool {
	var out []*api.IPPool
	for _, p := range pools {
		if m := mode(p); p.Spec.Disabled || m == api.EncapNever || m == "" || p.IsIPv6() != (family == 6) {
			continue
		}
		if ok, err := kernel.PoolSelectsNode(p.Spec.NodeSelector, node.Metadata.Labels); err != nil || !ok {
			continue
		}
		out = append(out, p)
	}
	return out
}

// tunnel is one of the node's tunnel addresses: its handle, the pools it
// may come from and the Node field that records it.
type tunnel struct {
	handle string
	family int
	pools  []*api.IPPool
	addr   *string
}

// fits reports whether a is an address inside one of t's pools.
func (t tunnel) fits(a string) bool {
	ip, err := netip.ParseAddr(a)
	if err != nil {
		return false
	}
	for _, p := range t.pools {
		if p.Prefix().Contains(ip) {
			return true
		}
	}
	return false
}

// settle sets *t.addr to the address the handle should hold: none when
// no pool applies, else the recorded one while it lies in a pool that
// applies, else a new one (the old one released first, so the handle
// never holds two). IPAM is asked only when the address must change,
// or when verify is set.
func (t tunnel) settle(ctx context.Context, ic IPAM, node string, verify bool) error {
	cur := *t.addr
	if len(t.pools) == 0 {
		if cur == "" && !verify {
			return nil
		}
		if _, err := ic.ReleaseByHandle(ctx, t.handle); err != nil {
			return fmt.Errorf("releasing tunnel address %q of %q: %w", cur, node, err)
		}
		*t.addr = ""
		return nil
	}
	if cur != "" && t.fits(cur) && !verify {
		return nil
	}
	if cur != "" && !t.fits(cur) {
		if _, err := ic.ReleaseByHandle(ctx, t.handle); err != nil {
			return fmt.Errorf("releasing tunnel address %q of %q outside its pools: %w", cur, node, err)
		}
	}
	names := make([]string, len(t.pools))
	for i, p := range t.pools {
		names[i] = p.Metadata.Name
	}
	addrs, err := ic.AutoAssign(ctx, ipam.AssignArgs{
		Node: node, HandleID: t.handle, Num: 1, Pools: names, Family: t.family,
		Attrs: ipam.Attributes{Type: ipam.TypeTunnel},
	})
	if err != nil {
		return fmt.Errorf("tunnel address for %q: %w", node, err)
	}
	*t.addr = addrs[0].String()
	return nil
}

// settle brings node's tunnel addresses in line with pools: an IPIP
// tunnel address from an IPIP pool that selects it, a VXLAN tunnel
// address (and MAC) from an IPv4 VXLAN pool that selects it and, when
// the node has an IPv6 address (the IPv6 tunnel runs over it), an IPv6
// VXLAN tunnel address (and MAC) from an IPv6 VXLAN pool that selects
// it; when no pool of a kind applies it releases that address and clears
// the fields. It returns the Node as written, or nil when the Node
// already recorded all of it. node is not changed; the write is
// conditional on its revision (datastore.ErrConflict when it is stale).
// Idempotent: the tunnel handles make a repeat allocation return the
// same address, and the MAC is derived from the node name.
func settle(ctx context.Context, st Store, ic IPAM, node *api.Node, pools []*api.IPPool, verify bool) (*api.Node, error) {
	if node.Spec.BGP == nil {
		return nil, fmt.Errorf("%w: node %q", ErrNoNodeAddress, node.Metadata.Name)
	}
	name := node.Metadata.Name
	n := *node
	bgp := *node.Spec.BGP
	n.Spec.BGP = &bgp
	s := &n.Spec
	ipipMode := func(p *api.IPPool) string { return p.Spec.IPIPMode }
	vxlanMode := func(p *api.IPPool) string { return p.Spec.VXLANMode }
	var v6pools []*api.IPPool
	if _, ok := n.Address6(); ok {
		v6pools = encapPoolsFor(pools, &n, 6, vxlanMode)
	}
	tunnels := []tunnel{
		{ipam.TunnelHandle(name), 4, encapPoolsFor(pools, &n, 4, ipipMode), &s.BGP.IPv4IPIPTunnelAddr},
		{VXLANTunnelHandle(name), 4, encapPoolsFor(pools, &n, 4, vxlanMode), &s.IPv4VXLANTunnelAddr},
		{VXLANV6TunnelHandle(name), 6, v6pools, &s.IPv6VXLANTunnelAddr},
	}
	tunnels = append(tunnels, wireguardTunnels(&n, pools)...)
	// Releases first, so a pool switching encapsulation can hand the
	// released address straight to the other tunnel.
	sort.SliceStable(tunnels, func(i, j int) bool { return len(tunnels[i].pools) == 0 && len(tunnels[j].pools) > 0 })
	for _, t := range tunnels {
		if err := t.settle(ctx, ic, name, verify); err != nil {
			return nil, err
		}
	}
	s.VXLANTunnelMACAddr, s.VXLANTunnelMACAddrV6 = "", ""
	if s.IPv4VXLANTunnelAddr != "" {
		s.VXLANTunnelMACAddr = felix.VXLANMAC(name).String()
	}
	if s.IPv6VXLANTunnelAddr != "" {
		s.VXLANTunnelMACAddrV6 = felix.VXLANMACV6(name).String()
	}
	if *s.Wireguard == (api.NodeWireguardSpec{}) {
		s.Wireguard = nil
	}
	was := &node.Spec
	if was.BGP.IPv4IPIPTunnelAddr == s.BGP.IPv4IPIPTunnelAddr && was.IPv4VXLANTunnelAddr == s.IPv4VXLANTunnelAddr &&
		was.VXLANTunnelMACAddr == s.VXLANTunnelMACAddr && was.IPv6VXLANTunnelAddr == s.IPv6VXLANTunnelAddr &&
		was.VXLANTunnelMACAddrV6 == s.VXLANTunnelMACAddrV6 && sameWireguard(was.Wireguard, s.Wireguard) {
		return nil, nil
	}
	if _, err := st.Update(ctx, &n); err != nil {
		return nil, err
	}
	log.WithFields(map[string]any{"ipipTunnelAddr": s.BGP.IPv4IPIPTunnelAddr, "vxlanTunnelAddr": s.IPv4VXLANTunnelAddr,
		"vxlanMAC": s.VXLANTunnelMACAddr, "vxlanTunnelAddrV6": s.IPv6VXLANTunnelAddr, "vxlanMACV6": s.VXLANTunnelMACAddrV6,
		"wireguardAddr": wgAddr(s.Wireguard, false), "wireguardAddrV6": wgAddr(s.Wireguard, true),
	}).Info("tunnel addresses updated")
	return &n, nil
}

// EnsureTunnelAddress reads the node's Node and every pool and settles
// the node's tunnel addresses from them (see settle), confirming each
// with IPAM; it retries when the Node changes under it. For one-shot
// callers (tools, tests): the Loop takes both from the node feed instead.
func EnsureTunnelAddress(ctx context.Context, ds *datastore.Client, ic *ipam.Client, name string) error {
	for i := 0; i < writeRetries; i++ {
		r, err := ds.Get(ctx, api.KindNode, name)
		if err != nil {
			return err
		}
		list, _, err := ds.List(ctx, api.KindIPPool)
		if err != nil {
			return err
		}
		pools := make([]*api.IPPool, 0, len(list))
		for _, r := range list {
			pools = append(pools, r.(*api.IPPool))
		}
		_, err = settle(ctx, ds, ic, r.(*api.Node), pools, true)
		if errors.Is(err, datastore.ErrConflict) {
			continue
		}
		return err
	}
	return fmt.Errorf("tunnel address for %q: %w", name, datastore.ErrConflict)
}
