package routetable_test

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/routetable"
)

// TestPreferredSourceInOtherTable: a route with a preferred source, in a
// table other than main (host encryption's table 82), is written with
// it, read back by a resync as the route wanted (kept, programmed), and
// a changed source rewrites it; a source of the other family is refused.
func TestPreferredSourceInOtherTable(t *testing.T) {
	e := newEnv(t)
	rt := routetable.New(routetable.Config{Protocol: proto, Table: 82}, e.k)
	r := routetable.Route{Dst: pfx("192.0.2.2/32"), Iface: "eth0", Src: netip.MustParseAddr("192.0.2.1")}
	if err := rt.SetRoutes(wantSet(r)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	show := func() string {
		t.Helper()
		out, err := exec.Command("ip", "-n", e.ns.Name, "route", "show", "table", "82").CombinedOutput()
		if err != nil {
			t.Fatalf("ip route show table 82: %v: %s", err, out)
		}
		return string(out)
	}
	if got := show(); !strings.Contains(got, "192.0.2.2 dev eth0 proto 82 scope link src 192.0.2.1") {
		t.Fatalf("table 82: %q", got)
	}
	rt.Resync()
	if err := rt.Apply(); err != nil || !rt.Programmed(r.Dst) {
		t.Fatalf("resync: %v, programmed %v", err, rt.Programmed(r.Dst))
	}
	e.ns.AddAddr(t, "eth0", "192.0.2.9/24")
	r.Src = netip.MustParseAddr("192.0.2.9")
	if err := rt.SetRoutes(wantSet(r)); err != nil {
		t.Fatal(err)
	}
	if err := rt.Apply(); err != nil {
		t.Fatal(err)
	}
	if got := show(); !strings.Contains(got, "src 192.0.2.9") || strings.Count(strings.TrimSpace(got), "\n") != 0 {
		t.Errorf("table 82 after the source changed: %q", got)
	}
	bad := routetable.Route{Dst: pfx("192.0.2.3/32"), Iface: "eth0", Src: netip.MustParseAddr("fd00::1")}
	if err := rt.SetRoutes(wantSet(bad)); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("an IPv6 source on an IPv4 route: %v", err)
	}
}
