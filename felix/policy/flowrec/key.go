package flowrec

import (
	"net/netip"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// flowKey names a connection as the filter chains see its first packet:
// after DNAT, before SNAT. For ICMP echo, sport is the identifier and
// dport the type.
type flowKey struct {
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16
}

// keyOfPacket reads the key of a marked packet.
func keyOfPacket(payload []byte) (flowKey, bool) {
	f, ok := flowlog.ParseFlow(payload)
	if !ok {
		return flowKey{}, false
	}
	k := flowKey{src: f.Src, dst: f.Dst, proto: f.Proto, sport: f.SrcPort, dport: f.DstPort}
	if f.ICMPType >= 0 {
		k.dport = uint16(f.ICMPType)
		// The identifier, read after any IPv6 extension headers (what
		// conntrack keys echo on).
		if f.ICMPID >= 0 {
			k.sport = uint16(f.ICMPID)
		}
	}
	return k, true
}
