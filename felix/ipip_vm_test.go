package felix_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestIPIPInVM checks the IPIP data path. It needs a kernel with the ipip
// module, which CI's kernel lacks, so tests/vm boots a VM that runs it
// with ROUTED_IN_VM=1; elsewhere it is skipped on purpose.
func TestIPIPInVM(t *testing.T) {
	requireVM(t)
	// eth0 192.0.2.1/24, MTU 1400; the VM has no nf_tables modules.
	h := newHarness(t, func(c *felix.Config) { c.Features.DisableNATOutgoing = true })
	h.f.ReplaceResources(resources(
		pool("cross", "10.244.0.0/16", "CrossSubnet", false),
		pool("always", "10.246.0.0/16", "Always", false),
		node("node-a", "192.0.2.1/24", "10.244.0.1"),
		node("node-b", "192.0.2.2/24", ""),
		node("node-c", "198.51.100.3/24", ""),
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-c", CIDR: pfx("10.244.3.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.246.2.0/26"), State: felix.AffinityConfirmed},
	})

	var tunl netlink.Link
	nstest.Eventually(t, 10*time.Second, func() string {
		l, err := h.ns.Handle.LinkByName("tunl0")
		if err != nil {
			return fmt.Sprintf("tunl0: %v", err)
		}
		a := l.Attrs()
		switch {
		case l.Type() != "ipip":
			return "tunl0 is a " + l.Type()
		case a.MTU != 1380:
			return fmt.Sprintf("tunl0 MTU %d, want 1380 (host 1400 - 20)", a.MTU)
		case a.Flags&net.FlagUp == 0:
			return "tunl0 is down"
		}
		if s := tunnelAddrs(t, h, l); s != "10.244.0.1/32" {
			return "tunl0 addresses " + s + ", want 10.244.0.1/32"
		}
		tunl = l
		return ""
	})
	eth0 := h.index(t, "eth0")
	onlinkVia := func(gw string) func(netlink.Route) bool {
		return func(r netlink.Route) bool {
			return r.Gw.String() == gw && r.LinkIndex == tunl.Attrs().Index && r.Flags&unix.RTNH_F_ONLINK != 0
		}
	}
	h.routeIs(t, "10.244.2.0/26", 5*time.Second, viaRoute("192.0.2.2", eth0), "same subnet (CrossSubnet): via 192.0.2.2 dev eth0")
	h.routeIs(t, "10.244.3.0/26", 5*time.Second, onlinkVia("198.51.100.3"), "cross subnet: via 198.51.100.3 dev tunl0 onlink")
	h.routeIs(t, "10.246.2.0/26", 5*time.Second, onlinkVia("192.0.2.2"), "IPIP Always: via 192.0.2.2 dev tunl0 onlink")
	// node-c borrowed 10.246.2.9 from node-b's block and announces it.
	h.f.OnBorrowedBlock(pfx("10.246.2.0/26"), map[netip.Addr]string{addr("10.246.2.9"): "node-c"})
	h.f.RouteUpdate(pfx("10.246.2.9/32"), addr("198.51.100.3"), addr("198.51.100.3"), 1024)
	h.routeIs(t, "10.246.2.9/32", 5*time.Second, onlinkVia("198.51.100.3"), "learned, IPIP Always: via tunl0 onlink")
	nstest.Eventually(t, 5*time.Second, func() string {
		if got, err := felix.ReadMTUFile(h.cfg.MTUFile); err != nil || got != 1380 {
			return fmt.Sprintf("MTU file = %d (%v), want 1380", got, err)
		}
		return ""
	})

	// No IPIP pool any more: the address goes, the device stays.
	h.f.ReplaceResources(resources(
		pool("cross", "10.244.0.0/16", "Never", false),
		node("node-a", "192.0.2.1/24", "10.244.0.1"),
		node("node-b", "192.0.2.2/24", ""),
	))
	nstest.Eventually(t, 5*time.Second, func() string {
		l, err := h.ns.Handle.LinkByName("tunl0")
		if err != nil {
			return fmt.Sprintf("tunl0 was removed: %v", err)
		}
		if s := tunnelAddrs(t, h, l); s != "" {
			return "tunl0 still has " + s
		}
		return ""
	})
	h.routeIs(t, "10.244.3.0/26", 5*time.Second, nil, "gone with node-c")
	nstest.Eventually(t, 5*time.Second, func() string {
		if got, _ := felix.ReadMTUFile(h.cfg.MTUFile); got != 1400 {
			return fmt.Sprintf("MTU file = %d, want 1400 without IPIP", got)
		}
		return ""
	})
}

func tunnelAddrs(t *testing.T, h *harness, l netlink.Link) string {
	addrs, err := h.ns.Handle.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	s := ""
	for i, a := range addrs {
		if i > 0 {
			s += ","
		}
		s += a.IPNet.String()
	}
	return s
}

// requireVM skips a test that needs kernel modules CI lacks (ipip) unless
// it runs inside the VM booted by tests/vm, which sets ROUTED_IN_VM=1.
func requireVM(t *testing.T) {
	t.Helper()
	if os.Getenv("ROUTED_IN_VM") != "1" {
		t.Skip("runs inside the VM booted by tests/vm (TestIPIPInVM there), which sets ROUTED_IN_VM=1")
	}
}
