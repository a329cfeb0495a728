package policy

import "net/netip"

// SetWorkloadEncapPorts sets the UDP ports whose packets from pods are
// dropped as a tunnel's encapsulation (the node's VXLAN ports; IPIP and
// IPv6 in IPv4 always are) and reports whether they changed (then Apply
// writes them).
func (m *Manager) SetWorkloadEncapPorts(ports []uint16) bool {
	m.calc.SetWorkloadEncapPorts(ports)
	return m.dp.SetWorkloadEncapPorts(ports)
}

// SetEncapSources sets the addresses and nets the node's tunnel packets
// (IPIP, UDP to the VXLAN ports) may come from: every node's addresses
// and the external node nets. Others are dropped before the node
// unwraps them (nftdp/encap_hosts.go, counted encap-src/not-node); until
// it is first called nothing is checked. It reports whether they
// changed (then Apply writes them).
func (m *Manager) SetEncapSources(srcs []netip.Prefix) bool {
	return m.dp.SetEncapSources(srcs)
}
