package flowrec

import (
	"net/netip"

	"github.com/routed-net/routed/felix/policy/flowlog"
)

// flowKey names a connection as the filter chains see its first packet:
// after DNAT, before SNAT. For ICMP echo, sport is the identifier and
// dport the type. The addresses are in their 16-byte form (an IPv4
// address IPv4-mapped) with v6 telling the families apart, so that an
// IPv6 packet from ::ffff:a.b.c.d is never taken for an IPv4 one from
// a.b.c.d: 38 bytes compared and hashed as one run of memory, where two
// netip.Addr made 56 bytes hashed field by field. The collector's maps
// hold a key per connection awaiting marks and per open connection.
type flowKey struct {
	src, dst     [16]byte
	sport, dport uint16
	proto        uint8
	v6           bool // an IPv6 connection (its addresses as they are)
}

// newFlowKey is the key of a connection from src to dst.
func newFlowKey(src, dst netip.Addr, proto uint8, sport, dport uint16) flowKey {
	return flowKey{src: src.As16(), dst: dst.As16(), proto: proto, sport: sport, dport: dport, v6: !src.Is4()}
}

// srcAddr and dstAddr are the key's addresses (an IPv4 connection's
// unmapped).
func (k *flowKey) srcAddr() netip.Addr { return k.addr(k.src) }
func (k *flowKey) dstAddr() netip.Addr { return k.addr(k.dst) }

func (k *flowKey) addr(b [16]byte) netip.Addr {
	a := netip.AddrFrom16(b)
	if k.v6 {
		return a
	}
	return a.Unmap()
}

// keyOfPacket reads the key of a marked packet.
func keyOfPacket(payload []byte) (flowKey, bool) {
	f, ok := flowlog.ParseFlow(payload)
	if !ok {
		return flowKey{}, false
	}
	k := newFlowKey(f.Src, f.Dst, f.Proto, f.SrcPort, f.DstPort)
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
