package routetable_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/routetable"
)

// oursAt lists the metrics of felix's routes for dst in the namespace.
func (e *env) oursAt(t *testing.T, dst netip.Prefix) []int {
	t.Helper()
	all, err := e.ns.Handle.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: proto}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, r := range all {
		if r.Dst != nil && r.Dst.String() == dst.String() {
			out = append(out, r.Priority)
		}
	}
	return out
}

// TestMetricChangeAddsBeforeItDeletes: a route whose metric changes (a
// learned route given a priority by a BGPFilter) is written at the new
// metric before the old one goes, so the prefix is never unrouted: the
// kernel announces the new route before it announces the old one's
// deletion. One route per prefix remains, at the wanted metric.
func TestMetricChangeAddsBeforeItDeletes(t *testing.T) {
	e := newEnv(t)
	h, err := netns.GetFromPath(e.ns.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	events := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	if err := netlink.RouteSubscribeWithOptions(events, done, netlink.RouteSubscribeOptions{Namespace: &h}); err != nil {
		t.Fatal(err)
	}
	// next waits for the kernel's next event about remote's prefix.
	next := func() netlink.RouteUpdate {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case u := <-events:
				if u.Dst != nil && u.Dst.String() == remote.Dst.String() {
					return u
				}
			case <-deadline:
				t.Fatal("no route event within 5s")
			}
		}
	}
	apply := func(r routetable.Route) {
		t.Helper()
		if err := e.rt.SetRoutes(wantSet(r)); err != nil {
			t.Fatal(err)
		}
		if err := e.rt.Apply(); err != nil {
			t.Fatal(err)
		}
		if got := e.oursAt(t, r.Dst); len(got) != 1 || uint32(got[0]) != r.Metric {
			t.Fatalf("after %v: felix's routes at metrics %v, want one", r, got)
		}
		if !e.rt.Programmed(r.Dst) {
			t.Fatalf("Programmed(%v) = false", r.Dst)
		}
	}
	apply(remote)
	if u := next(); u.Type != unix.RTM_NEWROUTE || u.Priority != 0 {
		t.Fatalf("first event %+v", u)
	}
	for _, m := range []uint32{100, 2000, 0} {
		old := 0
		if m != 100 {
			old = map[uint32]int{2000: 100, 0: 2000}[m]
		}
		r := remote
		r.Metric = m
		apply(r)
		if u := next(); u.Type != unix.RTM_NEWROUTE || uint32(u.Priority) != m {
			t.Fatalf("metric %d: first event %v at metric %d, want the new route", m, u.Type, u.Priority)
		}
		if u := next(); u.Type != unix.RTM_DELROUTE || u.Priority != old {
			t.Fatalf("metric %d: second event %v at metric %d, want the old route (%d) deleted", m, u.Type, u.Priority, old)
		}
	}
}

// TestResyncKeepsTheRouteAtTheWantedMetric: two routes of felix's for
// one prefix (a metric change cut short by a crash) leave one, the one
// at the wanted metric, untouched; a foreign route at another metric is
// no conflict, one at the wanted metric is.
func TestResyncKeepsTheRouteAtTheWantedMetric(t *testing.T) {
	e := newEnv(t)
	e.ip(t, "route", "add", remote.Dst.String(), "via", "192.0.2.2", "proto", fmt.Sprint(proto))
	e.ip(t, "route", "add", remote.Dst.String(), "via", "192.0.2.2", "proto", fmt.Sprint(proto), "metric", "300")
	e.ip(t, "route", "add", remote.Dst.String(), "via", "192.0.2.9", "proto", "static", "metric", "7")
	r := remote
	r.Metric = 300
	if err := e.rt.SetRoutes(wantSet(r)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := e.oursAt(t, r.Dst); len(got) != 1 || got[0] != 300 {
		t.Fatalf("felix's routes at metrics %v, want [300]", got)
	}
	if !e.rt.Programmed(r.Dst) {
		t.Fatal("the route at the wanted metric is not counted as programmed")
	}
	// A foreign route at the metric felix wants next holds the prefix.
	r.Metric = 7
	if err := e.rt.SetRoutes(wantSet(r)); err != nil {
		t.Fatal(err)
	}
	e.rt.Resync()
	if err := e.rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := e.oursAt(t, r.Dst); len(got) != 1 || got[0] != 300 {
		t.Fatalf("felix's routes at metrics %v, want the one at 300 kept while a foreign route holds metric 7", got)
	}
	if e.rt.Programmed(r.Dst) {
		t.Fatal("Programmed while a foreign route holds the wanted metric")
	}
	all, _ := e.ns.Handle.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: unix.RTPROT_STATIC}, netlink.RT_FILTER_PROTOCOL)
	if len(all) != 1 || all[0].Priority != 7 || all[0].Gw.String() != "192.0.2.9" {
		t.Fatalf("the foreign route was touched: %v", all)
	}
}
