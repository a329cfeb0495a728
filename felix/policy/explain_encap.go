package policy

import (
	"slices"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// DefaultVXLANPort is the UDP port felix drops from pods as VXLAN
// whatever FelixConfiguration says (IANA's).
const DefaultVXLANPort = nftdp.DefaultVXLANPort

// SetWorkloadEncapPorts tells Explain the UDP ports nftdp drops from
// pods as encapsulation (Manager.SetWorkloadEncapPorts; a model is told
// the cluster's VXLAN port). Until then, nftdp's default.
func (c *Calc) SetWorkloadEncapPorts(ports []uint16) {
	c.encapPorts = slices.Clone(ports)
}

// encapsulated models nftdp's drop of what pods send inside a tunnel's
// encapsulation (nftdp/encap.go): IP protocols 4 and 41, UDP to the
// VXLAN ports.
func (c *Calc) encapsulated(f Flow) bool {
	switch f.Proto {
	case 4, 41:
		return true
	case 17:
		ports := c.encapPorts
		if ports == nil {
			ports = []uint16{DefaultVXLANPort}
		}
		return slices.Contains(ports, f.DstPort)
	}
	return false
}

// decideEncap answers a direction for an encapsulated flow a workload
// sends (sender, or the workload holding the source): its egress is the
// encapsulation drop, before any policy, and its ingress is not
// reached. It reports whether it answered.
func (c *Calc) decideEncap(f Flow, sender *endpoint, in bool, d *Decision) bool {
	if !c.encapsulated(f) {
		return false
	}
	e := sender
	if e == nil {
		e = c.workloadAt(f.Src)
	}
	if e == nil {
		return false
	}
	if in {
		if w := c.workloadAt(f.Dst); w != nil {
			d.Endpoint, d.Node = w.key, w.nodeName()
		}
		d.Rule = RuleInfo{Kind: KindNotReached, Direction: d.Direction, Index: -1}
		return true
	}
	dir := "egress"
	if h := c.endpointAt(f.Dst); h != nil && IsHostEndpointKey(h.key) && h.nodeName() == e.nodeName() {
		dir = "to-host"
	}
	d.Endpoint, d.Node, d.Policed = e.key, e.nodeName(), true
	d.Rule = RuleInfo{ID: "wl-encap/" + dir, Kind: KindWorkloadEncap, Direction: dir, Index: -1, Action: "Deny"}
	return true
}
