package felix_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestTunnelMTUsFromFelixConfiguration: FelixConfiguration's vxlanMTU
// sets vxlan.routed's MTU and the pods' (the MTU file) at start, and
// ApplySettings changes both while felix runs; 0 goes back to the host
// MTU less the overhead. vxlanVNI and vxlanPort recreate the device.
// (tunl0 takes ipipMTU the same way; this kernel has no IPIP.)
func TestTunnelMTUsFromFelixConfiguration(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.VXLANMTU = 1300 })
	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "Always"),
		vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0"),
		vxlanNode("node-b", "192.0.2.2/24", "10.244.2.0")))
	h.f.ReplaceAffinities(nil)
	mtus := func(want int) func() string {
		return func() string {
			l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
			if err != nil {
				return err.Error()
			}
			file, err := felix.ReadMTUFile(h.cfg.MTUFile)
			if l.Attrs().MTU != want || file != want {
				return fmt.Sprintf("%s MTU %d, pod MTU file %d (%v); want %d", felix.VXLANDevice, l.Attrs().MTU, file, err, want)
			}
			return ""
		}
	}
	nstest.Eventually(t, 5*time.Second, mtus(1300))
	h.f.ApplySettings(felix.Settings{VXLANMTU: 1350})
	nstest.Eventually(t, 5*time.Second, mtus(1350))
	h.f.ApplySettings(felix.Settings{})
	nstest.Eventually(t, 5*time.Second, mtus(1400-felix.VXLANOverhead))

	// vxlanVNI and vxlanPort: the device is recreated with them.
	vni := func(wantVNI, wantPort int) func() string {
		return func() string {
			l, err := h.ns.Handle.LinkByName(felix.VXLANDevice)
			if err != nil {
				return err.Error()
			}
			x, ok := l.(*netlink.Vxlan)
			if !ok || x.VxlanId != wantVNI || x.Port != wantPort {
				return fmt.Sprintf("%s %+v, want VNI %d port %d", felix.VXLANDevice, l, wantVNI, wantPort)
			}
			return ""
		}
	}
	nstest.Eventually(t, 5*time.Second, vni(felix.VXLANVNI, felix.VXLANPort))
	h.f.ApplySettings(felix.Settings{VXLANVNI: 5000, VXLANPort: 8472})
	nstest.Eventually(t, 5*time.Second, vni(5000, 8472))
	h.f.ApplySettings(felix.Settings{})
	nstest.Eventually(t, 5*time.Second, vni(felix.VXLANVNI, felix.VXLANPort))
}
