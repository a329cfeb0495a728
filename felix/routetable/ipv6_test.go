package routetable_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/routetable"
)

// countingKernel counts the writes that reach the real kernel, to show a
// resync of an unchanged table writes nothing.
type countingKernel struct {
	routetable.Kernel
	writes int
}

func (c *countingKernel) Write(table int, ops []routetable.Op) []error {
	c.writes += len(ops)
	return c.Kernel.Write(table, ops)
}

var (
	wep6    = routetable.Route{Dst: pfx("fd00:244::1:5/128"), Iface: "cali1"}
	hole6   = routetable.Route{Dst: pfx("fd00:244::40/122"), Type: routetable.Blackhole}
	remote6 = routetable.Route{Dst: pfx("fd00:244::80/122"), Gw: netip.MustParseAddr("fd00:2::2")}
)

// TestIPv6RoutesNextToIPv4 programs the IPv6 route shapes felix uses
// (pod /128, block blackhole, block via a node) in the same table as
// IPv4 ones, at the kernel's default IPv6 metric, and shows resync
// leaves them (and foreign IPv6 routes) alone and removes only stale
// routes of its own protocol.
func TestIPv6RoutesNextToIPv4(t *testing.T) {
	e := newEnv(t)
	e.ns.AddAddr(t, "eth0", "fd00:2::1/64")
	ck := &countingKernel{Kernel: e.k}
	rt := routetable.New(routetable.Config{Protocol: proto}, ck)
	e.ip(t, "-6", "route", "add", "2001:db8:99::/48", "via", "fd00:2::9", "proto", "static")
	e.ip(t, "-6", "route", "add", "fd00:244::c0/122", "via", "fd00:2::10", "proto", "static")
	foreignOnWanted := routetable.Route{Dst: pfx("fd00:244::c0/122"), Gw: netip.MustParseAddr("fd00:2::3")}
	if err := rt.SetRoutes(wantSet(wep, wep6, hole6, remote6, foreignOnWanted)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	eth0, cali1 := e.ifindex(t, "eth0"), e.ifindex(t, "cali1")
	got := e.ns.Routes6(t)
	check := func(p netip.Prefix, f func(r netlink.Route) bool, what string) {
		t.Helper()
		r, ok := got[p]
		switch {
		case !ok:
			t.Errorf("IPv6 route %v missing (at metric 1024)", p)
		case int(r.Protocol) != proto:
			t.Errorf("route %v has protocol %d, want %d", p, r.Protocol, proto)
		case !f(r):
			t.Errorf("route %v = %+v, want %s", p, r, what)
		case !rt.Programmed(p):
			t.Errorf("Programmed(%v) = false", p)
		}
	}
	check(wep6.Dst, func(r netlink.Route) bool { return r.LinkIndex == cali1 && r.Gw == nil }, "dev cali1")
	check(hole6.Dst, func(r netlink.Route) bool { return r.Type == unix.RTN_BLACKHOLE }, "blackhole")
	check(remote6.Dst, func(r netlink.Route) bool { return r.LinkIndex == eth0 && r.Gw.String() == "fd00:2::2" }, "via fd00:2::2 dev eth0")
	if _, ok := e.ns.Routes(t)[wep.Dst]; !ok {
		t.Error("the IPv4 route next to them is missing")
	}
	if r := got[pfx("2001:db8:99::/48")]; r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign IPv6 route touched: %+v", r)
	}
	if r := got[foreignOnWanted.Dst]; r.Protocol != unix.RTPROT_STATIC || r.Gw.String() != "fd00:2::10" {
		t.Errorf("foreign IPv6 route on a wanted prefix was replaced: %+v", r)
	}

	// The kernel reports IPv6 routes differently (universe scope, metric
	// 1024, blackholes on lo): a resync must still find them in sync.
	before := ck.writes
	rt.Resync()
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if ck.writes != before {
		t.Errorf("resync of an unchanged table wrote %d routes, want 0", ck.writes-before)
	}

	// Stale routes of our protocol go, at the default metric and at
	// another one; a hand-deleted one comes back.
	e.ip(t, "-6", "route", "add", "fd00:244::100/122", "via", "fd00:2::4", "proto", fmt.Sprint(proto))
	e.ip(t, "-6", "route", "add", "fd00:244::140/122", "via", "fd00:2::4", "proto", fmt.Sprint(proto), "metric", "50")
	e.ip(t, "-6", "route", "del", "fd00:244::80/122")
	rt.Resync()
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	got = e.ns.Routes6(t)
	if _, ok := got[pfx("fd00:244::100/122")]; ok {
		t.Error("stale IPv6 route with our protocol survived a resync")
	}
	if r, ok := got[remote6.Dst]; !ok || r.Gw.String() != "fd00:2::2" {
		t.Errorf("hand-deleted IPv6 route did not come back: %+v", r)
	}
	all, err := e.ns.Handle.RouteListFiltered(netlink.FAMILY_V6, &netlink.Route{Protocol: proto}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Priority == 50 {
			t.Errorf("stale IPv6 route at metric 50 survived: %v", r)
		}
	}
	if r := e.ns.Routes6(t)[pfx("2001:db8:99::/48")]; r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign IPv6 route touched by resync: %+v", r)
	}

	// Unwanted: deleted.
	if err := rt.SetRoutes(wantSet(wep)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	got = e.ns.Routes6(t)
	for _, r := range []routetable.Route{wep6, hole6, remote6} {
		if _, ok := got[r.Dst]; ok {
			t.Errorf("IPv6 route %v still present after being unwanted", r)
		}
	}
	if r := got[foreignOnWanted.Dst]; r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign IPv6 route deleted with felix's: %+v", r)
	}
}

// TestIPv6OnlinkGatewayInsideItsPrefix: a block routed directly (via its
// node on eth0) moves to the node's VTEP, an address of that block, on
// another device with onlink (an IPv6 VXLAN pool). The kernel checks an
// IPv6 onlink gateway against the routes already there and refuses the
// plain replacement, since the block's own route on eth0 covers the
// gateway; felix deletes that route first, in the same batch, and the
// move happens in one Apply.
func TestIPv6OnlinkGatewayInsideItsPrefix(t *testing.T) {
	e := newEnv(t)
	e.ns.AddAddr(t, "eth0", "fd00:2::1/64")
	e.ns.Veth(t, "vx6", "vx6peer")
	direct := routetable.Route{Dst: pfx("fd00:244::80/122"), Gw: netip.MustParseAddr("fd00:2::2")}
	if err := e.rt.SetRoutes(wantSet(direct)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	vtep := netip.MustParseAddr("fd00:244::80")
	tunnelled := routetable.Route{Dst: direct.Dst, Iface: "vx6", Gw: vtep, OnLink: true}
	if err := e.rt.SetRoutes(wantSet(tunnelled)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatalf("moving the block onto its VTEP: %v", err)
	}
	vx6 := e.ifindex(t, "vx6")
	r, ok := e.ns.Routes6(t)[direct.Dst]
	if !ok || r.LinkIndex != vx6 || r.Gw.String() != vtep.String() || r.Flags&unix.RTNH_F_ONLINK == 0 || int(r.Protocol) != proto {
		t.Fatalf("route %v = %+v (present %v), want via %s dev vx6 onlink proto %d", direct.Dst, r, ok, vtep, proto)
	}
	if !e.rt.Programmed(direct.Dst) {
		t.Error("Programmed = false after the move")
	}
	// And back to direct: a plain replacement.
	if err := e.rt.SetRoutes(wantSet(direct)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if r := e.ns.Routes6(t)[direct.Dst]; r.Gw.String() != "fd00:2::2" {
		t.Errorf("back to direct: %+v", r)
	}
}
