package felix_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/natout"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/pkg/kernel"
)

func dualNode(name, addr4, addr6 string) *api.Node {
	n := node(name, addr4, "")
	n.Spec.BGP.IPv6Address = addr6
	return n
}

func dev6Route(idx int) func(netlink.Route) bool {
	return func(r netlink.Route) bool { return r.LinkIndex == idx && r.Gw == nil }
}

// TestFelixProgramsIPv6 drives felix's inputs directly on a dual-stack
// node: every IPv6 route shape, the import guard on learned IPv6
// routes, foreign IPv6 routes left alone, stale ones of protocol 82
// removed, and the IPv6 sysctls.
func TestFelixProgramsIPv6(t *testing.T) {
	h := newHarness(t, nil)
	h.ns.AddAddr(t, "eth0", "fd00:10::1/64")
	h.ns.Veth(t, "cali1", "pod1")
	h.ip(t, "-6", "route", "add", "2001:db8:77::/48", "via", "fd00:10::9", "proto", "static")
	h.f.ReplaceResources(resources(
		pool("v4", "10.244.0.0/16", "Never", false),
		pool("v6", "fd00:244::/112", "Never", true),
		dualNode("node-a", "192.0.2.1/24", "fd00:10::1/64"),
		dualNode("node-b", "192.0.2.2/24", "fd00:10::2/64"),
		wep("a1", "node-a", "cali1", "10.244.1.5/32", "fd00:244::5/128"),
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("fd00:244::/122"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("fd00:244::40/122"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("fd00:244::80/122"), State: felix.AffinityPending},
	})
	h.f.RouteUpdate(pfx("2001:db8:50::/48"), addr("fd00:10::fe"), addr("fd00:10::fe"), 1024) // from a ToR
	h.f.RouteUpdate(pfx("fd00:244::20/123"), addr("fd00:10::2"), addr("fd00:10::2"), 1024)   // inside node-a's block

	eth0, cali1 := h.index(t, "eth0"), h.index(t, "cali1")
	h.routeIs(t, "fd00:244::5/128", 5*time.Second, dev6Route(cali1), "dev cali1")
	h.routeIs(t, "fd00:244::/122", time.Second, blackhole, "blackhole")
	h.routeIs(t, "fd00:244::40/122", time.Second, viaRoute("fd00:10::2", eth0), "via fd00:10::2 dev eth0")
	h.routeIs(t, "2001:db8:50::/48", time.Second, viaRoute("fd00:10::fe", eth0), "via fd00:10::fe dev eth0")
	h.routeIs(t, "10.244.1.5/32", time.Second, devRoute(cali1), "the IPv4 pod route next to it")
	nstest.Eventually(t, 3*time.Second, func() string {
		if why := h.f.Filtered(pfx("fd00:244::20/123")); !strings.HasPrefix(why, felix.FilterOwnBlock) {
			return fmt.Sprintf("Filtered(/123 inside own IPv6 block) = %q, want %s", why, felix.FilterOwnBlock)
		}
		return ""
	})
	got := h.ns.Routes6(t)
	if _, ok := got[pfx("fd00:244::80/122")]; ok {
		t.Error("a pending IPv6 affinity was routed")
	}
	if _, ok := got[pfx("fd00:244::20/123")]; ok {
		t.Error("a learned /123 inside this node's IPv6 block reached the kernel")
	}
	if r := got[pfx("2001:db8:77::/48")]; r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign IPv6 route touched: %v", r)
	}

	h.sysctlsAre(t, map[string]string{
		"net/ipv6/conf/all/forwarding":   "1",
		"net/ipv6/conf/cali1/proxy_ndp":  "1",
		"net/ipv6/conf/cali1/forwarding": "1",
		"net/ipv6/conf/cali1/accept_ra":  "0",
	})

	// NAT outgoing for the IPv6 pool, in the ip6 table.
	c := nftConn(t, h)
	nstest.Eventually(t, 3*time.Second, func() string {
		got, err := natout.ReadSet6(c, natout.NATPoolsSet)
		if err != nil || !slices.Equal(got, []netip.Prefix{pfx("fd00:244::/112")}) {
			return fmt.Sprintf("ip6 nat-pools = %v (%v), want [fd00:244::/112]", got, err)
		}
		return ""
	})

	// Resync (every second here): a stale IPv6 route of protocol 82
	// goes, a hand-deleted one comes back, the foreign one stays.
	h.ip(t, "-6", "route", "add", "fd00:244::c0/122", "via", "fd00:10::4", "proto", fmt.Sprint(kernel.RouteProtocol))
	h.ip(t, "-6", "route", "del", "fd00:244::40/122")
	h.routeIs(t, "fd00:244::c0/122", 2500*time.Millisecond, nil, "stale route gone")
	h.routeIs(t, "fd00:244::40/122", 2500*time.Millisecond, viaRoute("fd00:10::2", eth0), "hand-deleted route back")
	if r := h.ns.Routes6(t)[pfx("2001:db8:77::/48")]; r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign IPv6 route touched by resync: %v", r)
	}

	h.f.RouteWithdraw(pfx("2001:db8:50::/48"))
	h.routeIs(t, "2001:db8:50::/48", 2*time.Second, nil, "")
	h.f.UpdateAffinity(felix.BlockAffinity{Node: "node-b", CIDR: pfx("fd00:244::40/122")}, true)
	h.routeIs(t, "fd00:244::40/122", 2*time.Second, nil, "")
	h.f.DeleteResource(api.KindWorkloadEndpoint, "a1")
	h.routeIs(t, "fd00:244::5/128", 2*time.Second, nil, "")
}

// TestFelixIPv6FromEtcd wires felix to a real etcd as the node agent
// does (resource sync and IPAM affinity watch): an IPv6 address
// assigned to another node makes its /122 block route via that node's
// IPv6 address; one assigned here, a blackhole; releasing the remote
// block removes its route.
func TestFelixIPv6FromEtcd(t *testing.T) {
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	ctx := context.Background()
	for _, r := range []api.Resource{
		pool("v6", "fd00:244::/112", "Never", false),
		dualNode("node-a", "192.0.2.1/24", "fd00:10::1/64"),
		dualNode("node-b", "192.0.2.2/24", "fd00:10::2/64"),
	} {
		if _, err := ds.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	h := newHarness(t, nil)
	h.ns.AddAddr(t, "eth0", "fd00:10::1/64")
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 1)
	t.Cleanup(func() { cancel(); <-done })
	fd := feed.New(ds, feed.Options{})
	fc := h.f.Consumer()
	fd.Subscribe("felix", fc.SubscribedKinds(), fc)
	go func() { _ = fd.Run(wctx); done <- struct{}{} }()

	ic := ipam.New(ds, ipam.WithEmptyBlockGrace(time.Nanosecond))
	assign := func(node, handle string) netip.Addr {
		t.Helper()
		ips, err := ic.AutoAssign(ctx, ipam.AssignArgs{Node: node, HandleID: handle, Family: 6})
		if err != nil || len(ips) != 1 || !ips[0].Is6() {
			t.Fatalf("assigning an IPv6 address to %s: %v %v", node, ips, err)
		}
		return ips[0]
	}
	remote := netip.PrefixFrom(assign("node-b", "pod-b"), 122).Masked()
	local := netip.PrefixFrom(assign("node-a", "pod-a"), 122).Masked()
	eth0 := h.index(t, "eth0")
	h.routeIs(t, remote.String(), 5*time.Second, viaRoute("fd00:10::2", eth0), "via node-b's IPv6 address dev eth0")
	h.routeIs(t, local.String(), time.Second, blackhole, "blackhole for node-a's own block")

	if _, err := ic.ReleaseByHandle(ctx, "pod-b"); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 3*time.Second, func() string {
		released, err := ic.ReleaseEmptyBlocks(ctx, "node-b")
		if err != nil || len(released) != 1 || released[0] != remote {
			return fmt.Sprintf("releasing node-b's empty block: %v %v", released, err)
		}
		return ""
	})
	h.routeIs(t, remote.String(), 3*time.Second, nil, "gone with its affinity")
	if r, ok := h.ns.Routes6(t)[local]; !ok || r.Type != unix.RTN_BLACKHOLE {
		t.Errorf("node-a's blackhole went with node-b's block: %v (present %v)", r, ok)
	}
}
