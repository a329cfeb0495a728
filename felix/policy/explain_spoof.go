package policy

import "net/netip"

// Kinds of the decisions Explain gives a flow sent by Flow.From from
// an address that is not From's.
const (
	// KindNotReached: the other direction's drop came first (ingress of
	// a flow dropped at its source).
	KindNotReached = "not reached: dropped at the source"
	// KindUnknownSender: Flow.From names no workload endpoint.
	KindUnknownSender = "unknown sender: no workload endpoint has that key"
)

var (
	// ipv6LinkLocal is the route every cali device has (routed-cni puts
	// the pods' gateway, fe80::ecee:eeff:feee:eeee/64, on the host side):
	// a pod's link-local sources have a route back through its device.
	ipv6LinkLocal = netip.MustParsePrefix("fe80::/64")
	// ipv4LocalMulticast: with 255.255.255.255, the destinations the
	// kernel's fib lookup lets a source 0.0.0.0 (DHCP) reach.
	ipv4LocalMulticast = netip.MustParsePrefix("224.0.0.0/24")
	ipv4Broadcast      = netip.AddrFrom4([4]byte{255, 255, 255, 255})
	// ipv4Multicast: where IGMP from 0.0.0.0 may go.
	ipv4Multicast = netip.MustParsePrefix("224.0.0.0/4")
)

// sourceIsSenders models nftdp's reverse-path check for a packet f the
// workload e sends: it passes when the node has a route to f.Src back
// through e's interface, which holds for e's own addresses (felix
// routes each of its networks to its interface) and IPv6 link-local
// ones (fe80::/64 on every cali device); IPv6's :: passes only as
// ICMPv6 types 131, 135 and 143 (DAD's solicitations, MLD reports:
// nftdp's dadTypes); an IPv4 0.0.0.0 passes only as a DHCP request
// (UDP 68 to 67) to the broadcast or local multicast addresses, or as
// IGMP to a multicast address (nftdp's zeroSource rules).
// Anything else (another pod's address, the node's, a remote one) is
// dropped.
//
// What the model cannot see: whether e's routes are programmed yet on
// its node (until they are, all its packets are dropped), and a node
// whose cali devices lack the link-local address (then its link-local
// sources are dropped too).
func sourceIsSenders(e *endpoint, f Flow) bool {
	src, dst := f.Src, f.Dst
	// No Unmap: an IPv6 packet from ::ffff:a.b.c.d has no route back
	// (the fib lookup is IPv6's), whoever holds a.b.c.d.
	switch {
	case src.Is6() && src == netip.IPv6Unspecified():
		return f.Proto == 58 && (f.ICMPType == 131 || f.ICMPType == 135 || f.ICMPType == 143)
	case src.Is6() && ipv6LinkLocal.Contains(src):
		return true
	case src.Is4() && src == netip.IPv4Unspecified():
		dhcp := f.Proto == 17 && f.SrcPort == 68 && f.DstPort == 67 && (dst == ipv4Broadcast || ipv4LocalMulticast.Contains(dst))
		return dhcp || f.Proto == 2 && ipv4Multicast.Contains(dst)
	}
	for p := range e.prefixes() {
		if p.Contains(src) {
			return true
		}
	}
	return false
}

// decideSender answers a direction for a flow whose sender Flow.From
// names: done when From is unknown or the source is not its (the
// reverse-path check drops the packet before any policy, ingress is
// never reached); otherwise sender is the endpoint whose egress policy
// decides (the kernel picks it by interface, not by source).
func (c *Calc) decideSender(f Flow, in bool, d *Decision) (sender *endpoint, done bool) {
	e := c.endpoint(f.From)
	if e == nil || IsHostEndpointKey(e.key) {
		d.Rule = RuleInfo{Kind: KindUnknownSender, Direction: d.Direction, Index: -1, Action: "Deny"}
		if !in {
			d.Endpoint = f.From
		}
		return nil, true
	}
	if sourceIsSenders(e, f) {
		return e, false
	}
	if in {
		if w := c.workloadAt(f.Dst); w != nil {
			d.Endpoint, d.Node = w.key, w.nodeName()
		}
		d.Rule = RuleInfo{Kind: KindNotReached, Direction: d.Direction, Index: -1}
		return nil, true
	}
	// To the node itself the kernel counts it as to-host: explain knows
	// a node's addresses only from its host endpoints.
	dir := "egress"
	if h := c.endpointAt(f.Dst); h != nil && IsHostEndpointKey(h.key) && h.nodeName() == e.nodeName() {
		dir = "to-host"
	}
	d.Endpoint, d.Node, d.Policed = e.key, e.nodeName(), true
	d.Rule = RuleInfo{ID: "spoofed-src/" + dir, Kind: KindSpoofedSource, Direction: dir, Index: -1, Action: "Deny"}
	return nil, true
}
