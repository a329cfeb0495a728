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
	node := func() *api.Node {
		r, err := ds.Get(ctx, api.KindNode, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return r.(*api.Node)
	}
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
