package flowrec

import (
	"encoding/binary"
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
		if id, ok := icmpID(payload); ok {
			k.sport = id
		}
	}
	return k, true
}

// icmpID is an ICMP or ICMPv6 header's identifier (echo, and what
// conntrack keys on for the others too).
func icmpID(b []byte) (uint16, bool) {
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if len(b) < ihl+6 {
			return 0, false
		}
		l4 = b[ihl:]
	case 6:
		if len(b) < 46 {
			return 0, false
		}
		l4 = b[40:]
	default:
		return 0, false
	}
	return binary.BigEndian.Uint16(l4[4:]), true
}
