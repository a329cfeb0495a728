package felix_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
)

// TestVXLANNamesTheDeviceHoldingTheVNI: a node moved from Calico still
// has Calico's vxlan.calico (VNI 4096, port 4789), and the kernel allows
// one VXLAN device per VNI and port, so vxlan.routed cannot be created.
// Felix's error names the device holding it and what to do (it said
// "vxlan.routed after creating it: Link not found"); once the device is
// deleted, vxlan.routed comes up.
func TestVXLANNamesTheDeviceHoldingTheVNI(t *testing.T) {
	h := newHarness(t, nil)
	h.ip(t, "link", "add", "vxlan.calico", "type", "vxlan", "id", fmt.Sprint(felix.VXLANVNI), "dstport", fmt.Sprint(felix.VXLANPort), "nolearning")
	h.f.ReplaceResources(resources(vxlanPool("vx", "10.244.0.0/16", "Always"),
		vxlanNode("node-a", "192.0.2.1/24", "10.244.1.0"),
		vxlanNode("node-b", "192.0.2.2/24", "10.244.2.0"),
	))
	h.f.ReplaceAffinities([]felix.BlockAffinity{
		{Node: "node-a", CIDR: pfx("10.244.1.0/26"), State: felix.AffinityConfirmed},
		{Node: "node-b", CIDR: pfx("10.244.2.0/26"), State: felix.AffinityConfirmed},
	})
	nstest.Eventually(t, 5*time.Second, func() string {
		for _, e := range h.logs.AllEntries() {
			if err, ok := e.Data["error"].(error); ok && strings.Contains(err.Error(), "vxlan.calico") && strings.Contains(err.Error(), "ip link del vxlan.calico") {
				return ""
			}
		}
		return "no error naming vxlan.calico"
	})
	h.ip(t, "link", "del", "vxlan.calico")
	nstest.Eventually(t, 5*time.Second, func() string {
		if link, _, _ := vxlanState(t, h); link == nil {
			return "no " + felix.VXLANDevice + " after vxlan.calico was deleted"
		}
		return ""
	})
}
