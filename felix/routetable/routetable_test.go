package routetable_test

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/routetable"
)

const proto = 82

var pfx = netip.MustParsePrefix

// fakeClock is a settable clock for grace-period tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type env struct {
	ns    *nstest.NS
	k     *routetable.NetlinkKernel
	rt    *routetable.RouteTable
	clock *fakeClock
}

// newEnv makes a namespace with eth0 (192.0.2.1/24, a veth) and a pod
// interface cali1, and a route table working in it.
func newEnv(t *testing.T) *env {
	n := nstest.New(t)
	n.Veth(t, "eth0", "eth0peer")
	n.AddAddr(t, "eth0", "192.0.2.1/24")
	n.Veth(t, "cali1", "pod1")
	h, err := netns.GetFromPath(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	k, err := routetable.NewNetlinkKernel(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	clock := &fakeClock{t: time.Unix(1000, 0)}
	rt := routetable.New(routetable.Config{Protocol: proto, GracePeriod: 10 * time.Second, Now: clock.Now}, k)
	return &env{ns: n, k: k, rt: rt, clock: clock}
}

func (e *env) ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"-n", e.ns.Name}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}

func (e *env) ifindex(t *testing.T, name string) int {
	l, err := e.ns.Handle.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().Index
}

func wantSet(rs ...routetable.Route) map[netip.Prefix]routetable.Route {
	m := map[netip.Prefix]routetable.Route{}
	for _, r := range rs {
		m[r.Dst] = r
	}
	return m
}

var (
	wep       = routetable.Route{Dst: pfx("10.244.1.5/32"), Iface: "cali1"}
	hole      = routetable.Route{Dst: pfx("10.244.1.0/26"), Type: routetable.Blackhole}
	remote    = routetable.Route{Dst: pfx("10.244.2.0/26"), Gw: netip.MustParseAddr("192.0.2.2")}
	onlink    = routetable.Route{Dst: pfx("10.244.3.0/26"), Iface: "eth0", Gw: netip.MustParseAddr("203.0.113.7"), OnLink: true}
	allShapes = []routetable.Route{wep, hole, remote, onlink}
)

func TestProgramsRouteShapesWithProtocol(t *testing.T) {
	e := newEnv(t)
	if err := e.rt.SetRoutes(wantSet(allShapes...)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	got := e.ns.Routes(t)
	eth0, cali1 := e.ifindex(t, "eth0"), e.ifindex(t, "cali1")
	check := func(p netip.Prefix, f func(r netlink.Route) bool, what string) {
		t.Helper()
		r, ok := got[p]
		if !ok {
			t.Fatalf("route %v missing", p)
		}
		if int(r.Protocol) != proto {
			t.Errorf("route %v has protocol %d, want %d", p, r.Protocol, proto)
		}
		if !f(r) {
			t.Errorf("route %v = %+v, want %s", p, r, what)
		}
		if !e.rt.Programmed(p) {
			t.Errorf("Programmed(%v) = false", p)
		}
	}
	check(wep.Dst, func(r netlink.Route) bool {
		return r.LinkIndex == cali1 && r.Gw == nil && r.Scope == netlink.SCOPE_LINK
	}, "dev cali1 scope link")
	check(hole.Dst, func(r netlink.Route) bool { return r.Type == unix.RTN_BLACKHOLE }, "blackhole")
	check(remote.Dst, func(r netlink.Route) bool {
		return r.LinkIndex == eth0 && r.Gw.String() == "192.0.2.2"
	}, "via 192.0.2.2 dev eth0")
	check(onlink.Dst, func(r netlink.Route) bool {
		return r.LinkIndex == eth0 && r.Gw.String() == "203.0.113.7" && r.Flags&unix.RTNH_F_ONLINK != 0
	}, "via 203.0.113.7 dev eth0 onlink")

	// A second Apply with nothing changed writes nothing and stays in sync.
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	// Removing routes from the wanted set deletes them.
	if err := e.rt.SetRoutes(wantSet(wep)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	got = e.ns.Routes(t)
	for _, r := range []routetable.Route{hole, remote, onlink} {
		if _, ok := got[r.Dst]; ok {
			t.Errorf("route %v still present after being unwanted", r)
		}
		if e.rt.Programmed(r.Dst) {
			t.Errorf("Programmed(%v) still true", r.Dst)
		}
	}
}

func TestForeignRoutesAreNeverTouched(t *testing.T) {
	e := newEnv(t)
	// An unrelated static route, and a static route on a prefix felix wants.
	e.ip(t, "route", "add", "198.51.100.0/24", "via", "192.0.2.9", "proto", "static")
	e.ip(t, "route", "add", "10.244.2.0/26", "via", "192.0.2.10", "proto", "static")
	if err := e.rt.SetRoutes(wantSet(wep, remote)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e.rt.Resync()
		if err := e.rt.Apply(); err != nil {
			t.Fatal(err)
		}
	}
	got := e.ns.Routes(t)
	if r, ok := got[pfx("198.51.100.0/24")]; !ok || r.Protocol != unix.RTPROT_STATIC {
		t.Errorf("foreign route 198.51.100.0/24 was touched: %+v (present %v)", r, ok)
	}
	if r := got[remote.Dst]; r.Protocol != unix.RTPROT_STATIC || r.Gw.String() != "192.0.2.10" {
		t.Errorf("foreign route on a wanted prefix was replaced: %+v", r)
	}
	if e.rt.Programmed(remote.Dst) {
		t.Error("Programmed reports a prefix held by a foreign route")
	}
	if !e.rt.Programmed(wep.Dst) {
		t.Error("the non-conflicting route was not programmed")
	}
	// Once the foreign route goes, felix's route takes its place.
	e.ip(t, "route", "del", "10.244.2.0/26", "proto", "static")
	e.rt.Resync()
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if r := e.ns.Routes(t)[remote.Dst]; r.Protocol != proto {
		t.Errorf("after the foreign route left, got %+v", r)
	}
}

func TestResyncRestoresDeletedAndRemovesStale(t *testing.T) {
	e := newEnv(t)
	if err := e.rt.SetRoutes(wantSet(allShapes...)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	e.ip(t, "route", "del", "10.244.2.0/26")
	e.ip(t, "route", "replace", "10.244.1.0/26", "via", "192.0.2.77", "proto", fmt.Sprint(proto))
	e.ip(t, "route", "add", "10.244.9.0/26", "via", "192.0.2.4", "proto", fmt.Sprint(proto))
	e.ip(t, "route", "add", "10.244.10.0/26", "via", "192.0.2.4", "proto", fmt.Sprint(proto), "metric", "50")

	e.rt.Resync()
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	got := e.ns.Routes(t)
	if r, ok := got[remote.Dst]; !ok || r.Gw.String() != "192.0.2.2" {
		t.Errorf("hand-deleted route did not come back: %+v", r)
	}
	if r := got[hole.Dst]; r.Type != unix.RTN_BLACKHOLE {
		t.Errorf("hand-modified route not restored: %+v", r)
	}
	if _, ok := got[pfx("10.244.9.0/26")]; ok {
		t.Error("stale route with our protocol survived a resync")
	}
	all, _ := e.ns.Handle.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: proto}, netlink.RT_FILTER_PROTOCOL)
	for _, r := range all {
		if r.Priority == 50 {
			t.Errorf("stale route at metric 50 survived: %v", r)
		}
	}
}

func TestRouteWaitsForInterface(t *testing.T) {
	e := newEnv(t)
	later := routetable.Route{Dst: pfx("10.244.1.9/32"), Iface: "cali2"}
	if err := e.rt.SetRoutes(wantSet(wep, later)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatalf("a missing interface must not be an error: %v", err)
	}
	if e.rt.Programmed(later.Dst) {
		t.Fatal("route via a missing interface reported programmed")
	}
	l := e.ns.Veth(t, "cali2", "pod2")
	e.rt.OnLinkUpdate(routetable.Link{Name: "cali2", Index: l.Attrs().Index, Up: true}, false)
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if r, ok := e.ns.Routes(t)[later.Dst]; !ok || r.LinkIndex != l.Attrs().Index {
		t.Fatalf("route did not appear once cali2 did: %+v", r)
	}
	// The device goes away: the kernel drops the route, felix forgets it.
	if err := e.ns.Handle.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	e.rt.OnLinkUpdate(routetable.Link{Name: "cali2", Index: l.Attrs().Index}, true)
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if e.rt.Programmed(later.Dst) {
		t.Error("route still reported programmed after its device was deleted")
	}
}

func TestGracePeriodProtectsNewInterfaces(t *testing.T) {
	e := newEnv(t)
	if err := e.rt.SetRoutes(wantSet(wep)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	// The CNI plugin creates cali3 and its host route before felix hears
	// of the pod.
	l := e.ns.Veth(t, "cali3", "pod3")
	e.ip(t, "route", "add", "10.244.1.7/32", "dev", "cali3", "scope", "link", "proto", fmt.Sprint(proto))
	e.rt.OnLinkUpdate(routetable.Link{Name: "cali3", Index: l.Attrs().Index, Up: true}, false)
	e.rt.Resync()
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.ns.Routes(t)[pfx("10.244.1.7/32")]; !ok {
		t.Fatal("felix deleted a CNI route on a new interface within the grace period")
	}
	if w := e.rt.WakeAt(); !w.Equal(e.clock.Now().Add(10 * time.Second)) {
		t.Errorf("WakeAt = %v, want grace end", w)
	}
	e.clock.Add(11 * time.Second)
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.ns.Routes(t)[pfx("10.244.1.7/32")]; ok {
		t.Fatal("unwanted route survived the end of the grace period")
	}
}

// TestGracePeriodOnlyForPodDevices: with GraceFor naming pods' devices,
// a route of ours on a new device of felix's own (a tunnel's) is moved
// at once when another device must carry it (a node's blocks moving
// from the VXLAN device to WireGuard's), while a new pod device's
// route still waits out the grace period.
func TestGracePeriodOnlyForPodDevices(t *testing.T) {
	e := newEnv(t)
	e.rt = routetable.New(routetable.Config{Protocol: proto, GracePeriod: 10 * time.Second, Now: e.clock.Now,
		GraceFor: func(n string) bool { return strings.HasPrefix(n, "cali") }}, e.k)
	if err := e.rt.SetRoutes(wantSet(wep)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	tun := e.ns.Veth(t, "tun7", "tun7peer")
	pod := e.ns.Veth(t, "cali7", "pod7")
	e.ip(t, "route", "add", "10.244.7.0/26", "dev", "tun7", "scope", "link", "proto", fmt.Sprint(proto))
	e.ip(t, "route", "add", "10.244.1.77/32", "dev", "cali7", "scope", "link", "proto", fmt.Sprint(proto))
	e.rt.OnLinkUpdate(routetable.Link{Name: "tun7", Index: tun.Attrs().Index, Up: true}, false)
	e.rt.OnLinkUpdate(routetable.Link{Name: "cali7", Index: pod.Attrs().Index, Up: true}, false)
	e.rt.Resync()
	// The block now goes by eth0 instead of the young tunnel device.
	if err := e.rt.SetRoutes(wantSet(wep, routetable.Route{Dst: pfx("10.244.7.0/26"), Iface: "eth0"})); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	routes := e.ns.Routes(t)
	if r, ok := routes[pfx("10.244.7.0/26")]; !ok || r.LinkIndex != e.ifindex(t, "eth0") {
		t.Fatalf("the block's route on the 0 s old tunnel device was not moved to eth0: %+v (present %v)", r, ok)
	}
	if _, ok := routes[pfx("10.244.1.77/32")]; !ok {
		t.Fatal("felix deleted a CNI route on a new pod device within the grace period")
	}
}

func TestInvalidRoutesAreRejected(t *testing.T) {
	rt := routetable.New(routetable.Config{Protocol: proto}, nil)
	bad := []routetable.Route{
		{Dst: pfx("10.0.0.1/24"), Iface: "x"},
		{Dst: pfx("10.0.0.0/24")},
		{Dst: pfx("10.0.0.0/24"), Gw: netip.MustParseAddr("10.1.1.1"), OnLink: true},
		{Dst: pfx("fd00::1/64"), Iface: "x"},
		{Dst: pfx("fd00::/64"), Gw: netip.MustParseAddr("10.1.1.1")},
		{Dst: pfx("10.0.0.0/24"), Gw: netip.MustParseAddr("fd00::1")},
	}
	for _, r := range bad {
		if err := rt.SetRoutes(map[netip.Prefix]routetable.Route{r.Dst: r}); err == nil {
			t.Errorf("SetRoutes(%v) accepted an invalid route", r)
		}
	}
}
