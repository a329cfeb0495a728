package flowlog

import (
	"encoding/binary"
	"net/netip"
)

// Flow is what a packet's headers say about its connection.
type Flow struct {
	Src, Dst netip.Addr
	Proto    uint8
	// SrcPort and DstPort are set for TCP, UDP, SCTP and UDPLite.
	SrcPort, DstPort uint16
	// ICMPType and ICMPCode are set for ICMP and ICMPv6 (else -1);
	// ICMPID is the identifier in the next two bytes (what conntrack
	// keys echo on), -1 when the header is shorter.
	ICMPType, ICMPCode, ICMPID int
	// Fragment: a non-first fragment, which carries no transport
	// header; Proto is still the upper-layer protocol, as nftables'
	// `meta l4proto` sees it, and no ports are set.
	Fragment bool
	// Incomplete: the IPv6 extension header chain could not be walked
	// to its end (a header runs past the copied bytes, or more than
	// MaxExtHeaders): Proto is the header the walk stopped at and no
	// ports are set.
	Incomplete bool
}

// ParseFlow decodes an IPv4 or IPv6 header and the ports or ICMP type
// after it; ok is false when the payload is no IP packet. IPv6
// extension headers are walked as the kernel walks them (see
// isExtHeader), so Proto is the upper-layer protocol that nftables and
// conntrack see. It never reads outside b.
func ParseFlow(b []byte) (f Flow, ok bool) {
	f.ICMPType, f.ICMPCode, f.ICMPID = -1, -1, -1
	if len(b) < 1 {
		return f, false
	}
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		if len(b) < 20 {
			return f, false
		}
		ihl := int(b[0]&0x0f) * 4
		f.Src = netip.AddrFrom4([4]byte(b[12:16]))
		f.Dst = netip.AddrFrom4([4]byte(b[16:20]))
		f.Proto = b[9]
		// Only the first fragment carries the transport header.
		f.Fragment = binary.BigEndian.Uint16(b[6:])&0x1fff != 0
		if ihl >= 20 && len(b) >= ihl && !f.Fragment {
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < 40 {
			return f, false
		}
		f.Src = netip.AddrFrom16([16]byte(b[8:24]))
		f.Dst = netip.AddrFrom16([16]byte(b[24:40]))
		proto, off, frag, incomplete := walkExt6(b)
		f.Proto, f.Fragment, f.Incomplete = proto, frag, incomplete
		if off >= 0 {
			l4 = b[off:]
		}
	default:
		return f, false
	}
	switch f.Proto {
	case 6, 17, 132, 136:
		if len(l4) >= 4 {
			f.SrcPort = binary.BigEndian.Uint16(l4)
			f.DstPort = binary.BigEndian.Uint16(l4[2:])
		}
	case 1, 58:
		if len(l4) >= 2 {
			f.ICMPType, f.ICMPCode = int(l4[0]), int(l4[1])
		}
		if len(l4) >= 6 {
			f.ICMPID = int(binary.BigEndian.Uint16(l4[4:]))
		}
	}
	return f, true
}

// ProtoName is Calico's name of an IP protocol, or its number.
func ProtoName(p uint8) string {
	switch p {
	case 1:
		return "ICMP"
	case 6:
		return "TCP"
	case 17:
		return "UDP"
	case 58:
		return "ICMPv6"
	case 132:
		return "SCTP"
	case 136:
		return "UDPLite"
	}
	return itoa(int(p))
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [4]byte
	n := len(b)
	for ; i > 0; i /= 10 {
		n--
		b[n] = byte('0' + i%10)
	}
	return string(b[n:])
}
