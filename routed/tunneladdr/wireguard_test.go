package tunneladdr

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
)

const (
	testKey   = "xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg="
	testKeyV6 = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw="
)

// TestWireguardAddressFollowsKeys: a node that publishes a WireGuard
// key of a family gets its device's address of that family from a pool
// selecting it, whatever the pool's encapsulation (here Never), under
// handle wireguard-tunnel-addr-<node> (wireguard-v6-… for IPv6), as a
// tunnel allocation distinct from the IPIP tunnel's address in the same
// pool; IPAM's leak check does not take it for a leak; a node that
// withdraws its key (encryption off) loses it (released, spec.wireguard
// cleared); and a deleted node's is freed by IPAM GC.
func TestWireguardAddressFollowsKeys(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24"), V6: netip.MustParsePrefix("fd00:10::5/64")}); err != nil {
		t.Fatal(err)
	}
	node := func() *api.Node { return getNode(t, ds, "n1") }
	setKeys := func(v4, v6 string) {
		n := node()
		n.Status.WireguardPublicKey, n.Status.WireguardPublicKeyV6 = v4, v6
		if _, err := ds.Update(ctx, n); err != nil {
			t.Fatal(err)
		}
		if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
			t.Fatal(err)
		}
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p4}\nspec: {cidr: 10.53.0.0/24}\n"+
		"---\napiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p6}\nspec: {cidr: 'fd00:53::/120', blockSize: 122}\n"+
		"---\napiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: ipip}\nspec: {cidr: 10.54.0.0/24, ipipMode: Always}\n")
	setKeys("", "")
	if n := node(); n.Spec.Wireguard != nil {
		t.Fatalf("a node without WireGuard keys got device addresses %+v", *n.Spec.Wireguard)
	}
	setKeys(testKey, testKeyV6)
	n := node()
	a4, ok4 := n.WireguardAddress(false)
	a6, ok6 := n.WireguardAddress(true)
	if !ok4 || !ok6 {
		t.Fatalf("device addresses %+v, want one per family", n.Spec.Wireguard)
	}
	if ipip := n.Spec.BGP.IPv4IPIPTunnelAddr; ipip == "" || ipip == a4.String() {
		t.Fatalf("IPIP tunnel address %q, WireGuard's %s: want two distinct addresses", ipip, a4)
	}
	for a, h := range map[netip.Addr]string{a4: WireguardTunnelHandle("n1"), a6: WireguardV6TunnelHandle("n1")} {
		info, err := ic.IPInfo(ctx, a)
		if err != nil || info.Handle != h || info.Type != ipam.TypeTunnel || info.Node != "n1" {
			t.Fatalf("%s: allocation %+v (%v), want a tunnel allocation of n1 under %s", a, info, err, h)
		}
	}
	rep, err := ic.Check(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Leaks) != 0 {
		t.Fatalf("IPAM check reports leaks: %+v", rep.Leaks)
	}
	// Idempotent.
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := node().WireguardAddress(false); got != a4 {
		t.Fatalf("device address changed from %s to %s", a4, got)
	}
	// IPv6 encryption off: only the IPv6 address goes.
	setKeys(testKey, "")
	if n := node(); n.Spec.Wireguard == nil || n.Spec.Wireguard.InterfaceIPv6Address != "" || n.Spec.Wireguard.InterfaceIPv4Address != a4.String() {
		t.Fatalf("after the IPv6 key went: %+v", n.Spec.Wireguard)
	}
	if _, err := ic.IPInfo(ctx, a6); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Fatalf("IPv6 device address %s still allocated: %v", a6, err)
	}
	// The node goes: GC frees its device address.
	if err := ds.Delete(ctx, api.KindNode, "n1", ""); err != nil && !errors.Is(err, datastore.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := ic.GC(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := ic.IPInfo(ctx, a4); !errors.Is(err, ipam.ErrNotAllocated) {
		t.Fatalf("a deleted node's device address %s still allocated: %v", a4, err)
	}
}

// getNode reads a Node or fails the test.
func getNode(t *testing.T, ds *datastore.Client, name string) *api.Node {
	t.Helper()
	r, err := ds.Get(context.Background(), api.KindNode, name)
	if err != nil {
		t.Fatal(err)
	}
	return r.(*api.Node)
}

// TestWireguardAddressReclaimedAfterOldGC: an IPAM GC leader of a
// version before WireGuard device addresses were tunnel addresses it
// knew frees the node's (here by releasing its handle, as such a GC
// does) and a pod gets the address. The next verifying pass (the Loop's
// first, after an error, and every recheck) gives the node a new device
// address under its WireGuard handle, as a tunnel allocation, and
// records it; the pod keeps its own.
func TestWireguardAddressReclaimedAfterOldGC(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	ic := ipam.New(ds)
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p4}\nspec: {cidr: 10.55.0.0/24}\n")
	n := getNode(t, ds, "n1")
	n.Status.WireguardPublicKey = testKey
	if _, err := ds.Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	old, ok := getNode(t, ds, "n1").WireguardAddress(false)
	if !ok {
		t.Fatal("no device address")
	}
	if _, err := ic.ReleaseByHandle(ctx, WireguardTunnelHandle("n1")); err != nil {
		t.Fatal(err)
	}
	if err := ic.AssignIP(ctx, old, "k8s-pod-network.pod1", "n1", ipam.Attributes{}); err != nil {
		t.Fatal(err)
	}
	if err := EnsureTunnelAddress(ctx, ds, ic, "n1"); err != nil {
		t.Fatal(err)
	}
	now, ok := getNode(t, ds, "n1").WireguardAddress(false)
	if !ok || now == old {
		t.Fatalf("device address after the old GC freed %s and a pod took it: %v (recorded %v)", old, now, ok)
	}
	info, err := ic.IPInfo(ctx, now)
	if err != nil || info.Handle != WireguardTunnelHandle("n1") || info.Type != ipam.TypeTunnel || info.Node != "n1" {
		t.Fatalf("%s: allocation %+v (%v), want a tunnel allocation of n1 under its WireGuard handle", now, info, err)
	}
	if info, err := ic.IPInfo(ctx, old); err != nil || info.Handle != "k8s-pod-network.pod1" {
		t.Fatalf("%s: allocation %+v (%v), want the pod's", old, info, err)
	}
}
