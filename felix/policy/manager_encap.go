package policy

// SetWorkloadEncapPorts sets the UDP ports whose packets from pods are
// dropped as a tunnel's encapsulation (the node's VXLAN ports; IPIP and
// IPv6 in IPv4 always are) and reports whether they changed (then Apply
// writes them).
func (m *Manager) SetWorkloadEncapPorts(ports []uint16) bool {
	m.calc.SetWorkloadEncapPorts(ports)
	return m.dp.SetWorkloadEncapPorts(ports)
}
