package daemon

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/ipam"
)

func newDS(t *testing.T) *datastore.Client {
	t.Helper()
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	return ds
}

func apply(t *testing.T, ds *datastore.Client, yaml string) {
	t.Helper()
	dec, err := api.Decode([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range dec.Resources {
		if _, err := ds.Apply(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRegisterNodeKeepsOperatorSettings(t *testing.T) {
	t.Parallel()
	ds := newDS(t)
	ctx := context.Background()
	apply(t, ds, `apiVersion: routed.io/v1
kind: Node
metadata: {name: n1, labels: {rack: r1}}
spec: {bgp: {asNumber: 65001, routeReflectorClusterID: 224.0.0.1}}
`)
	n, err := RegisterNode(ctx, ds, "n1", Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.BGP.IPv4Address != "10.0.0.5/24" || n.Spec.BGP.ASNumber != 65001 ||
		n.Spec.BGP.RouteReflectorClusterID != "224.0.0.1" || n.Metadata.Labels["rack"] != "r1" {
		t.Fatalf("registration lost operator settings or the address: %+v %+v", n.Spec.BGP, n.Metadata.Labels)
	}
	// A fresh node is created with its hostname label.
	n2, err := RegisterNode(ctx, ds, "n2", Addresses{V4: netip.MustParsePrefix("10.0.1.6/24")})
	if err != nil || n2.Metadata.Labels["kubernetes.io/hostname"] != "n2" {
		t.Fatalf("new node: %v %+v", err, n2)
	}
}

func TestEnsureDefaultPool(t *testing.T) {
	t.Parallel()
	ds := newDS(t)
	ctx := context.Background()
	if err := EnsureDefaultPool(ctx, ds, DefaultPool{CIDR: "10.9.0.0/16", BlockSize: 26, IPIPMode: "Never"}); err != nil {
		t.Fatal(err)
	}
	// Present pools are left alone, even if the settings differ.
	if err := EnsureDefaultPool(ctx, ds, DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 26, IPIPMode: "Never"}); err != nil {
		t.Fatal(err)
	}
	pools, _, err := ds.List(ctx, api.KindIPPool)
	if err != nil || len(pools) != 1 || pools[0].(*api.IPPool).Spec.CIDR != "10.9.0.0/16" {
		t.Fatalf("pools: %v %v", err, pools)
	}
	// The IPv6 pool is added once, next to existing pools.
	v6 := DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 26, IPIPMode: "Never", CIDR6: "fd00:9::/48", BlockSize6: 122}
	for range 2 {
		if err := EnsureDefaultPool(ctx, ds, v6); err != nil {
			t.Fatal(err)
		}
	}
	pools, _, err = ds.List(ctx, api.KindIPPool)
	if err != nil || len(pools) != 2 || pools[1].(*api.IPPool).Spec.CIDR != "fd00:9::/48" || pools[1].Meta().Name != "default-ipv6-ippool" {
		t.Fatalf("pools after the IPv6 default: %v %v", err, pools)
	}
	if err := EnsureDefaultPool(ctx, newDS(t), DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 26, IPIPMode: "Never", CIDR6: "fd00:9::/48", BlockSize6: 64}); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "ROUTED_IPV6POOL") {
		t.Fatalf("bad IPv6 block size: %v", err)
	}
	// A bad pool from the environment is an error naming the field.
	ds2 := newDS(t)
	err = EnsureDefaultPool(ctx, ds2, DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 40, IPIPMode: "Never"})
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad block size: %v", err)
	}
}

func TestTunnelAddressFollowsPools(t *testing.T) {
	t.Parallel()
	ds := newDS(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	if _, err := RegisterNode(ctx, ds, "n1", Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: CrossSubnet}\n")
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
	apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.50.0.0/24, ipipMode: Never}\n")
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
	ds := newDS(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	if _, err := RegisterNode(ctx, ds, "n1", Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	node := func() *api.Node {
		r, err := ds.Get(ctx, api.KindNode, "n1")
		if err != nil {
			t.Fatal(err)
		}
		return r.(*api.Node)
	}
	apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.51.0.0/24, vxlanMode: CrossSubnet}\n")
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
	apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.51.0.0/24, ipipMode: Always}\n")
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

func TestDefaultPoolVXLAN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ds := newDS(t)
	if err := EnsureDefaultPool(ctx, ds, DefaultPool{CIDR: "10.9.0.0/16", BlockSize: 26, IPIPMode: "Never", VXLANMode: "CrossSubnet"}); err != nil {
		t.Fatal(err)
	}
	pools, _, err := ds.List(ctx, api.KindIPPool)
	if err != nil || len(pools) != 1 || pools[0].(*api.IPPool).Spec.VXLANMode != "CrossSubnet" {
		t.Fatalf("pools: %v %v, want one with vxlanMode CrossSubnet", err, pools)
	}
	// Both encapsulations: an error naming the field, no pool.
	err = EnsureDefaultPool(ctx, newDS(t), DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 26, IPIPMode: "Always", VXLANMode: "Always"})
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "spec.vxlanMode") {
		t.Fatalf("IPIP and VXLAN together: %v", err)
	}
}
