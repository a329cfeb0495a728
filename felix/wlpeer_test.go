package felix_test

import (
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestWorkloadPeeringAddresses drives felix in a fresh namespace: the
// peering addresses confd asks for land on the pod devices as /32 and
// /128, move when asked, come back after someone removes them, reach a pod device created later, and go when no longer
// wanted (after PeeringRetireGrace), a stale one at once; the eth0 address and the kernel's IPv6
// link-local stay.
func TestWorkloadPeeringAddresses(t *testing.T) {
	// No periodic resync within the test: what it sees, felix did on the
	// change.
	h := newHarness(t, func(c *felix.Config) { c.ResyncInterval = time.Hour })
	h.ns.Veth(t, "cali1", "pod1")
	h.ns.Veth(t, "cali2", "pod2")
	// A full-length address left on a pod device (an older peering
	// address felix put there before a restart) is felix's to remove.
	h.ns.AddAddr(t, "cali2", "169.254.9.9/32")
	h.f.ReplaceResources(resources(pool("default", "10.244.0.0/16", "Never", false), node("node-a", "192.0.2.1/24", ""),
		wep("a1", "node-a", "cali1", "10.244.1.5/32")))
	h.f.ReplaceAffinities(nil)
	p4, p6 := netip.MustParseAddr("169.254.0.179"), netip.MustParseAddr("fd00:179::1")

	// addrs lists dev's full-length addresses and whether it still has
	// its other ones (eth0's /24, the kernel's fe80::/64).
	addrs := func(dev string) []string {
		out, err := exec.Command("ip", "-n", h.ns.Name, "-o", "addr", "show", "dev", dev).CombinedOutput()
		if err != nil {
			t.Fatalf("ip addr show %s: %v: %s", dev, err, out)
		}
		var got []string
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && (strings.HasSuffix(f[3], "/32") || strings.HasSuffix(f[3], "/128")) {
				got = append(got, f[3])
			}
		}
		slices.Sort(got)
		return got
	}
	want := func(dev string, w ...string) {
		t.Helper()
		nstest.Eventually(t, 5*time.Second+felix.PeeringRetireGrace, func() string {
			if got := addrs(dev); !slices.Equal(got, w) {
				return dev + ": " + strings.Join(got, " ") + ", want " + strings.Join(w, " ")
			}
			return ""
		})
	}

	h.f.SetWorkloadPeering(map[string][]netip.Addr{"cali1": {p4, p6}})
	want("cali1", "169.254.0.179/32", "fd00:179::1/128")
	want("cali2")
	want("eth0")

	// Removed by hand: back at the next reconcile.
	h.ip(t, "addr", "del", "169.254.0.179/32", "dev", "cali1")
	h.f.SetWorkloadPeering(map[string][]netip.Addr{"cali1": {p4, p6}})
	want("cali1", "169.254.0.179/32", "fd00:179::1/128")

	// A pod device created after the request gets its address.
	h.f.SetWorkloadPeering(map[string][]netip.Addr{"cali1": {p4}, "cali3": {p4}})
	want("cali1", "169.254.0.179/32")
	h.ns.Veth(t, "cali3", "pod3")
	want("cali3", "169.254.0.179/32")

	// Unwanted addresses stay PeeringRetireGrace, for the speaker's
	// Cease to reach the pod over them, then go.
	retired := time.Now()
	h.f.SetWorkloadPeering(nil)
	want("cali1")
	want("cali3")
	// The kernel flushed the pod's route with cali1's last IPv4 address;
	// felix puts it back in the same pass, not at the next periodic
	// resync (an hour here).
	cali1 := h.index(t, "cali1")
	h.routeIs(t, "10.244.1.5/32", 5*time.Second, devRoute(cali1), "dev cali1 scope link")
	if took := time.Since(retired); took < felix.PeeringRetireGrace-100*time.Millisecond {
		t.Errorf("retired peering addresses went after %v, before the %v grace", took, felix.PeeringRetireGrace)
	}
	if out, err := exec.Command("ip", "-n", h.ns.Name, "addr", "show").CombinedOutput(); err != nil ||
		!strings.Contains(string(out), "192.0.2.1/24") || !strings.Contains(string(out), "fe80::") {
		t.Fatalf("felix removed addresses it does not own: %v\n%s", err, out)
	}
}
