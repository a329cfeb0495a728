package felix_test

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
)

// TestIPIPVXLANSwitchInVM switches one pool from IPIP CrossSubnet to
// VXLAN CrossSubnet and back on a running felix: the cross-subnet block
// moves from tunl0 to vxlan.routed and back, tunl0 loses and regains its
// address, vxlan.routed comes and goes, and the pod MTU follows (host
// 1400: 1380 under IPIP, 1350 under VXLAN). Needs ipip: tests/vm runs it.
func TestIPIPVXLANSwitchInVM(t *testing.T) {
	requireVM(t)
	h := newHarness(t, func(c *felix.Config) { c.Features.DisableNATOutgoing = true })
	// While a node's pool switches, the daemon moves its tunnel address
	// from one field to the other; felix sees the Node as the daemon wrote it.
	nodes := func(vxlan bool) []api.Resource {
		var out []api.Resource
		for _, n := range []struct{ name, addr, tun string }{
			{"node-a", "192.0.2.1/24", "10.244.0.1"}, {"node-c", "198.51.100.3/24", "10.244.3.1"},
		} {
			if vxlan {
				out = append(out, vxlanNode(n.name, n.addr, n.tun))
			} else {
				out = append(out, node(n.name, n.addr, n.tun))
			}
		}
		return out
	}
	ipip := func() map[api.Kind][]api.Resource {
		return resources(append(nodes(false), pool("p", "10.244.0.0/16", "CrossSubnet", false))...)
	}
	vx := func() map[api.Kind][]api.Resource {
		return resources(append(nodes(true), vxlanPool("p", "10.244.0.0/16", "CrossSubnet"))...)
	}
	h.f.ReplaceResources(ipip())
	h.f.ReplaceAffinities([]felix.BlockAffinity{{Node: "node-c", CIDR: pfx("10.244.3.0/26"), State: felix.AffinityConfirmed}})

	// over waits until the block is routed onlink via gw on dev, tunl0
	// holds tunAddr (none: ""), vxlan.routed exists or not, and the pod
	// MTU is mtu.
	over := func(dev, gw, tunAddr string, vxlanDev bool, mtu int) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			l, err := h.ns.Handle.LinkByName(dev)
			if err != nil {
				return fmt.Sprintf("%s: %v", dev, err)
			}
			r, ok := h.ns.Routes(t)[pfx("10.244.3.0/26")]
			if !ok || r.LinkIndex != l.Attrs().Index || r.Gw.String() != gw || r.Flags&unix.RTNH_F_ONLINK == 0 {
				return fmt.Sprintf("10.244.3.0/26 = %v, want via %s dev %s onlink", r, gw, dev)
			}
			tunl, err := h.ns.Handle.LinkByName("tunl0")
			if err != nil {
				return fmt.Sprintf("tunl0: %v", err)
			}
			if s := tunnelAddrs(t, h, tunl); s != tunAddr {
				return fmt.Sprintf("tunl0 addresses %q, want %q", s, tunAddr)
			}
			if _, err := h.ns.Handle.LinkByName(felix.VXLANDevice); (err == nil) != vxlanDev {
				return fmt.Sprintf("%s present: %v, want %v", felix.VXLANDevice, err == nil, vxlanDev)
			}
			if got, err := felix.ReadMTUFile(h.cfg.MTUFile); err != nil || got != mtu {
				return fmt.Sprintf("MTU file = %d (%v), want %d", got, err, mtu)
			}
			return ""
		})
	}
	over("tunl0", "198.51.100.3", "10.244.0.1/32", false, 1380)
	start := time.Now()
	h.f.ReplaceResources(vx())
	over(felix.VXLANDevice, "10.244.3.1", "", true, 1350)
	t.Logf("IPIP -> VXLAN converged in %v", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	h.f.ReplaceResources(ipip())
	over("tunl0", "198.51.100.3", "10.244.0.1/32", false, 1380)
	t.Logf("VXLAN -> IPIP converged in %v", time.Since(start).Round(time.Millisecond))
}
