package nftdp

import (
	"slices"
)

// Packets a pod sends wrapped in a tunnel's encapsulation (IPIP, IPv6 in
// IPv4, or UDP to a VXLAN port) are dropped before any policy, both to
// the host and forwarded, as Calico does by default
// (allowIPIPPacketsFromWorkloads and allowVXLANPacketsFromWorkloads
// false). The host's tunnel devices (tunl0, vxlan.routed, the kernel's
// fallback sit0) decapsulate such a packet from any source, here or on
// the node it is forwarded to, and the inner packet then arrives on the
// tunnel device, where the reverse-path check for pods' interfaces
// (base.go) does not apply: a pod could send from any pod's address
// past policies that admit only that pod.

// chainEncap+direction ("wl-encap-egress", "wl-encap-to-host") match
// the encapsulated packets; chainEncapDrop+direction drop them, counted
// "wl-encap/<direction>" and logged "D wl-encap <direction>".
const (
	chainEncap     = "wl-encap-"
	chainEncapDrop = "wl-encap-drop-"
)

// DefaultVXLANPort is VXLAN's IANA port, dropped from pods until
// SetWorkloadEncapPorts says which ports the node's VXLAN devices use.
const DefaultVXLANPort = 4789

// encapProtos are the IP protocols of IP-in-IP tunnels: IPv4 (4) and
// IPv6 (41) inside IPv4 or IPv6.
var encapProtos = []uint8{4, 41}

// encapRules are a direction's matches: each jumps to that direction's
// drop chain.
func encapRules(dir string, udpPorts []uint16) []Rule {
	var rs []Rule
	for _, p := range encapProtos {
		rs = append(rs, Rule{Proto: p, Action: ActJump, Target: chainEncapDrop + dir})
	}
	if len(udpPorts) > 0 {
		udp := Rule{Proto: 17, Action: ActJump, Target: chainEncapDrop + dir}
		for _, p := range udpPorts {
			udp.Dst.Ports = append(udp.Dst.Ports, PortRange{p, p})
		}
		rs = append(rs, udp)
	}
	return rs
}

// SetWorkloadEncapPorts sets the UDP destination ports whose packets
// from pods are dropped as encapsulated (the node's VXLAN port) and
// reports whether they changed. Until it is called, DefaultVXLANPort.
// An empty list keeps IPIP's and IPv6-in-IPv4's drop.
func (d *Dataplane) SetWorkloadEncapPorts(ports []uint16) bool {
	ports = slices.Compact(slices.Sorted(slices.Values(ports)))
	if slices.Equal(ports, d.encapPorts) {
		return false
	}
	d.encapPorts = ports
	for _, dir := range []string{"egress", "to-host"} {
		d.setInternal(chainEncap+dir, nil, encapRules(dir, ports))
	}
	d.syncEncapSrcChain() // the outer-source check follows the ports
	return true
}
