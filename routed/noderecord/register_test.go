package noderecord

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
)

func TestRegisterNodeKeepsOperatorSettings(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	dstest.Apply(t, ds, `apiVersion: routed.io/v1
kind: Node
metadata: {name: n1, labels: {rack: r1}}
spec: {bgp: {asNumber: 65001, routeReflectorClusterID: 224.0.0.1}}
`)
	n, err := Register(ctx, ds, "n1", Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.BGP.IPv4Address != "10.0.0.5/24" || n.Spec.BGP.ASNumber != 65001 ||
		n.Spec.BGP.RouteReflectorClusterID != "224.0.0.1" || n.Metadata.Labels["rack"] != "r1" {
		t.Fatalf("registration lost operator settings or the address: %+v %+v", n.Spec.BGP, n.Metadata.Labels)
	}
	// A fresh node is created with its hostname label.
	n2, err := Register(ctx, ds, "n2", Addresses{V4: netip.MustParsePrefix("10.0.1.6/24")})
	if err != nil || n2.Metadata.Labels["kubernetes.io/hostname"] != "n2" {
		t.Fatalf("new node: %v %+v", err, n2)
	}
}

func TestEnsureDefaultPool(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
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
	if err := EnsureDefaultPool(ctx, dstest.Client(t), DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 26, IPIPMode: "Never", CIDR6: "fd00:9::/48", BlockSize6: 64}); !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "ROUTED_IPV6POOL") {
		t.Fatalf("bad IPv6 block size: %v", err)
	}
	// A bad pool from the environment is an error naming the field.
	ds2 := dstest.Client(t)
	err = EnsureDefaultPool(ctx, ds2, DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 40, IPIPMode: "Never"})
	if !errors.Is(err, api.ErrInvalid) {
		t.Fatalf("bad block size: %v", err)
	}
}

func TestDefaultPoolVXLAN(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ds := dstest.Client(t)
	if err := EnsureDefaultPool(ctx, ds, DefaultPool{CIDR: "10.9.0.0/16", BlockSize: 26, IPIPMode: "Never", VXLANMode: "CrossSubnet"}); err != nil {
		t.Fatal(err)
	}
	pools, _, err := ds.List(ctx, api.KindIPPool)
	if err != nil || len(pools) != 1 || pools[0].(*api.IPPool).Spec.VXLANMode != "CrossSubnet" {
		t.Fatalf("pools: %v %v, want one with vxlanMode CrossSubnet", err, pools)
	}
	// The IPv6 default pool takes a vxlanMode too (CALICO_IPV6POOL_VXLAN).
	if err := EnsureDefaultPool(ctx, ds, DefaultPool{CIDR6: "fd00:19::/48", BlockSize6: 122, VXLANMode6: "Always"}); err != nil {
		t.Fatal(err)
	}
	pools, _, err = ds.List(ctx, api.KindIPPool)
	if err != nil || len(pools) != 2 || !pools[1].(*api.IPPool).IsIPv6() || pools[1].(*api.IPPool).Spec.VXLANMode != "Always" {
		t.Fatalf("pools: %v %v, want an IPv6 one with vxlanMode Always", err, pools)
	}
	// Both encapsulations: an error naming the field, no pool.
	err = EnsureDefaultPool(ctx, dstest.Client(t), DefaultPool{CIDR: "10.8.0.0/16", BlockSize: 26, IPIPMode: "Always", VXLANMode: "Always"})
	if !errors.Is(err, api.ErrInvalid) || !strings.Contains(err.Error(), "spec.vxlanMode") {
		t.Fatalf("IPIP and VXLAN together: %v", err)
	}
}
