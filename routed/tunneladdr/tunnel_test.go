package tunneladdr

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
)

func TestTunnelAddressFollowsPools(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: CrossSubnet}\n")
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	r, _ := ds.Get(ctx, api.KindNode, "n1")
	tun := r.(*api.Node).Spec.BGP.IPv4IPIPTunnelAddr
	if a, err := netip.ParseAddr(tun); err != nil || !netip.MustParsePrefix("10.50.0.0/24").Contains(a) {
		t.Fatalf("tunnel address %q not from the IPIP pool", tun)
	}
	// Idempotent: the same address again.
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	r, _ = ds.Get(ctx, api.KindNode, "n1")
	if got := r.(*api.Node).Spec.BGP.IPv4IPIPTunnelAddr; got != tun {
		t.Fatalf("tunnel address changed from %s to %s", tun, got)
	}
	// No IPIP pool any more: the address is released and cleared.
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Never}\n")
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	r, _ = ds.Get(ctx, api.KindNode, "n1")
	if got := r.(*api.Node).Spec.BGP.IPv4IPIPTunnelAddr; got != "" {
		t.Fatalf("tunnel address %s kept without an IPIP pool", got)
	}
	if _, err := ic.IPInfo(ctx, netip.MustParseAddr(tun)); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Fatalf("tunnel address still allocated: %v", err)
	}
}

func TestVXLANTunnelAddressFollowsPools(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	node := func() *api.Node { return getNode(t, ds, "n1") }
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.51.0.0/24, vxlanMode: CrossSubnet}\n")
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	n := node()
	vtep := n.Spec.IPv4VXLANTunnelAddr
	if a, err := netip.ParseAddr(vtep); err != nil || !netip.MustParsePrefix("10.51.0.0/24").Contains(a) {
		t.Fatalf("VXLAN tunnel address %q not from the VXLAN pool", vtep)
	}
	if n.Spec.VXLANTunnelMACAddr != felix.VXLANMAC("n1").String() || n.Spec.BGP.IPv4IPIPTunnelAddr != "" {
		t.Fatalf("MAC %q (want %s), IPIP address %q (want none)", n.Spec.VXLANTunnelMACAddr, felix.VXLANMAC("n1"), n.Spec.BGP.IPv4IPIPTunnelAddr)
	}
	if info, err := ic.IPInfo(ctx, netip.MustParseAddr(vtep)); err != nil || info.Handle != VXLANTunnelHandle("n1") {
		t.Fatalf("VTEP allocation %+v (%v), want handle %s", info, err, VXLANTunnelHandle("n1"))
	}
	// The pool switches to IPIP: the VXLAN address goes, an IPIP one comes.
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.51.0.0/24, ipipMode: Always}\n")
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	n = node()
	if n.Spec.IPv4VXLANTunnelAddr != "" || n.Spec.VXLANTunnelMACAddr != "" || n.Spec.BGP.IPv4IPIPTunnelAddr == "" {
		t.Fatalf("after switching to IPIP: vxlan %q mac %q ipip %q", n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr, n.Spec.BGP.IPv4IPIPTunnelAddr)
	}
	if info, err := ic.IPInfo(ctx, netip.MustParseAddr(vtep)); err == nil && info.Handle == VXLANTunnelHandle("n1") {
		t.Fatalf("VXLAN tunnel address %s still held by %s", vtep, info.Handle)
	}
}

// TestVXLANv6TunnelAddressFollowsPools: an IPv6 VXLAN pool gives a node
// with an IPv6 address an IPv6 VTEP address from that pool (handle
// vxlan-v6-tunnel-addr-<node>, Calico's) and MAC, beside its IPv4 VTEP
// from the IPv4 VXLAN pool (whose allocation the IPv6 pool does not
// enter); a node without an IPv6 address gets none (the tunnel runs
// over it); the pool set to Never releases the address and clears both
// fields.
func TestVXLANv6TunnelAddressFollowsPools(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	for name, a := range map[string]noderecord.Addresses{
		"n1": {V4: netip.MustParsePrefix("10.0.0.5/24"), V6: netip.MustParsePrefix("fd00:10::5/64")},
		"n2": {V4: netip.MustParsePrefix("10.0.0.6/24")},
	} {
		if _, err := noderecord.Register(ctx, ds, name, a); err != nil {
			t.Fatal(err)
		}
	}
	node := func(name string) *api.Node {
		r, err := ds.Get(ctx, api.KindNode, name)
		if err != nil {
			t.Fatal(err)
		}
		return r.(*api.Node)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p4}\nspec: {cidr: 10.52.0.0/24, vxlanMode: Always}\n"+
		"---\napiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p6}\nspec: {cidr: 'fd00:52::/120', blockSize: 122, vxlanMode: CrossSubnet}\n")
	for _, name := range []string{"n1", "n2"} {
		if err := EnsureTunnelAddress(ctx, ds, ic, name); err != nil {
			t.Fatal(err)
		}
	}
	n := node("n1")
	v6 := n.Spec.IPv6VXLANTunnelAddr
	if a, err := netip.ParseAddr(v6); err != nil || !netip.MustParsePrefix("fd00:52::/120").Contains(a) {
		t.Fatalf("IPv6 VXLAN tunnel address %q not from the IPv6 VXLAN pool", v6)
	}
	if a, err := netip.ParseAddr(n.Spec.IPv4VXLANTunnelAddr); err != nil || !netip.MustParsePrefix("10.52.0.0/24").Contains(a) {
		t.Fatalf("IPv4 VXLAN tunnel address %q not from the IPv4 VXLAN pool", n.Spec.IPv4VXLANTunnelAddr)
	}
	if n.Spec.VXLANTunnelMACAddrV6 != felix.VXLANMACV6("n1").String() || n.Spec.VXLANTunnelMACAddrV6 == n.Spec.VXLANTunnelMACAddr {
		t.Fatalf("IPv6 MAC %q (want %s, distinct from the IPv4 device's %s)", n.Spec.VXLANTunnelMACAddrV6, felix.VXLANMACV6("n1"), n.Spec.VXLANTunnelMACAddr)
	}
	if info, err := ic.IPInfo(ctx, netip.MustParseAddr(v6)); err != nil || info.Handle != VXLANV6TunnelHandle("n1") {
		t.Fatalf("IPv6 VTEP allocation %+v (%v), want handle %s", info, err, VXLANV6TunnelHandle("n1"))
	}
	if n2 := node("n2"); n2.Spec.IPv6VXLANTunnelAddr != "" || n2.Spec.VXLANTunnelMACAddrV6 != "" || n2.Spec.IPv4VXLANTunnelAddr == "" {
		t.Fatalf("n2 (no IPv6 address): IPv6 VTEP %q MAC %q, IPv4 VTEP %q; want only the IPv4 one", n2.Spec.IPv6VXLANTunnelAddr, n2.Spec.VXLANTunnelMACAddrV6, n2.Spec.IPv4VXLANTunnelAddr)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p6}\nspec: {cidr: 'fd00:52::/120', blockSize: 122, vxlanMode: Never}\n")
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	if n := node("n1"); n.Spec.IPv6VXLANTunnelAddr != "" || n.Spec.VXLANTunnelMACAddrV6 != "" || n.Spec.IPv4VXLANTunnelAddr == "" {
		t.Fatalf("after the IPv6 pool went Never: IPv6 VTEP %q MAC %q, IPv4 VTEP %q", n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6, n.Spec.IPv4VXLANTunnelAddr)
	}
	if _, err := ic.IPInfo(ctx, netip.MustParseAddr(v6)); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Fatalf("IPv6 VTEP %s still allocated: %v", v6, err)
	}
}
