package felix

import (
	"context"
	"slices"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// syncEncapPorts gives the policy dataplane the UDP ports whose packets
// from pods are dropped as encapsulated (nftdp/encap.go): VXLAN's IANA
// port and every port this felix has configured its VXLAN devices with.
// A port stays dropped after the VXLAN port changes (until felix
// restarts), and a new one is dropped before the devices move to it
// (coverVXLANPort): a pod must never meet a device on a port the drop
// does not cover.
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

// coverVXLANPort makes sure the policy dataplane drops pods' UDP to the
// configured VXLAN port before the devices are (re)created on it: when
// the port is not covered yet (felix's start, a port FelixConfiguration
// just set), the policy is applied now, with full's resync. It reports
// whether the devices may be applied (when the policy write failed they
// stay as they are, on a covered port, until the retry) and whether it
// applied the policy.
func (l *loop) coverVXLANPort(ctx context.Context, full bool) (ok, applied bool, err error) {
	if l.policy == nil || slices.Contains(l.hosts.encapPorts, uint16(l.cfg.vxlanPort())) {
		return true, false, nil
	}
	l.syncEncapPorts()
	if err := l.applyPolicy(ctx, full); err != nil {
		return false, true, err
	}
	return true, true, nil
}
