package felix

import (
	"slices"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// syncEncapPorts gives the policy dataplane the UDP ports whose packets
// from pods are dropped as encapsulated (nftdp/encap.go): VXLAN's IANA
// port and every port this felix has configured its VXLAN devices with.
// A port stays dropped after the VXLAN port changes (until felix
// restarts): the devices move to a new port in the same pass as the
// policy, before it, and a pod must never meet a device on a port the
// drop does not cover yet.
func (l *loop) syncEncapPorts() {
	p := uint16(l.cfg.vxlanPort())
	if !slices.Contains(l.hosts.encapPorts, p) {
		l.hosts.encapPorts = append(l.hosts.encapPorts, p)
	}
	if !slices.Contains(l.hosts.encapPorts, nftdp.DefaultVXLANPort) {
		l.hosts.encapPorts = append(l.hosts.encapPorts, nftdp.DefaultVXLANPort)
	}
	if l.policy.SetWorkloadEncapPorts(l.hosts.encapPorts) {
		l.policyDirty = true
	}
}
