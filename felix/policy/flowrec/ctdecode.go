package flowrec

import (
	"encoding/binary"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
)

// ctnetlink's message and attribute numbers (linux/netfilter/
// nfnetlink_conntrack.h) that the collector reads; x/sys/unix does not
// carry them. Everything else in an event is skipped undecoded.
const (
	ctMsgNew    = 0 // IPCTNL_MSG_CT_NEW
	ctMsgDelete = 2 // IPCTNL_MSG_CT_DELETE

	ctaTupleOrig     = 1  // CTA_TUPLE_ORIG
	ctaTupleReply    = 2  // CTA_TUPLE_REPLY
	ctaCountersOrig  = 9  // CTA_COUNTERS_ORIG
	ctaCountersReply = 10 // CTA_COUNTERS_REPLY

	ctaTupleIP    = 1 // CTA_TUPLE_IP
	ctaTupleProto = 2 // CTA_TUPLE_PROTO

	ctaIPv4Src = 1 // CTA_IP_V4_SRC
	ctaIPv6Src = 3 // CTA_IP_V6_SRC

	ctaProtoNum        = 1 // CTA_PROTO_NUM
	ctaProtoSrcPort    = 2 // CTA_PROTO_SRC_PORT
	ctaProtoICMPID     = 4 // CTA_PROTO_ICMP_ID
	ctaProtoICMPType   = 5 // CTA_PROTO_ICMP_TYPE
	ctaProtoICMPv6ID   = 7 // CTA_PROTO_ICMPV6_ID
	ctaProtoICMPv6Type = 8 // CTA_PROTO_ICMPV6_TYPE

	ctaCountersPackets = 1 // CTA_COUNTERS_PACKETS (big-endian u64)
	ctaCountersBytes   = 2 // CTA_COUNTERS_BYTES

	nlaTypeMask = 0x3fff // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
	nlmsgHeader = 16
	nfgenHeader = 4
)

// counts are a connection's packets and bytes each way, original
// direction (out: from the source) and reply (in).
type counts struct {
	pktsOut, bytesOut, pktsIn, bytesIn uint64
}

// ctTuple is what the collector reads of a conntrack tuple: its source
// address and port (or ICMP identifier and type), and its protocol.
type ctTuple struct {
	src      netip.Addr
	proto    uint8
	sport    uint16
	icmpID   uint16
	icmpType uint8
}

// appendCtEvents decodes the conntrack NEW and DESTROY events of one
// netlink datagram (UPDATE and anything undecodable is skipped).
func appendCtEvents(evs []ctEvent, b []byte, at time.Time) []ctEvent {
	for len(b) >= nlmsgHeader {
		l := int(binary.NativeEndian.Uint32(b))
		if l < nlmsgHeader || l > len(b) {
			break
		}
		typ, flags := binary.NativeEndian.Uint16(b[4:]), binary.NativeEndian.Uint16(b[6:])
		if typ>>8 == unix.NFNL_SUBSYS_CTNETLINK && l >= nlmsgHeader+nfgenHeader {
			var destroy bool
			ok := true
			switch typ & 0xff {
			case ctMsgNew:
				// A NEW message without CREATE or EXCL is an
				// UPDATE (not subscribed to, but skipped if sent).
				ok = flags&(unix.NLM_F_CREATE|unix.NLM_F_EXCL) != 0
			case ctMsgDelete:
				destroy = true
			default:
				ok = false
			}
			if ok {
				// Decoded in place: an event is too big to copy
				// around per connection.
				evs = append(evs, ctEvent{destroy: destroy, at: at})
				if !decodeCtEvent(&evs[len(evs)-1], b[nlmsgHeader+nfgenHeader:l]) {
					evs = evs[:len(evs)-1]
				}
			}
		}
		b = b[min(len(b), (l+3)&^3):]
	}
	return evs
}

// nextAttr splits the first netlink attribute off b: its type (flags
// masked), its payload and what follows it; ok is false at the end or
// at a malformed attribute. (A loop over it costs a quarter of one
// over an iterator of closures, nested three deep here.)
func nextAttr(b []byte) (typ uint16, v, rest []byte, ok bool) {
	if len(b) < 4 {
		return 0, nil, nil, false
	}
	l := int(binary.NativeEndian.Uint16(b))
	if l < 4 || l > len(b) {
		return 0, nil, nil, false
	}
	return binary.NativeEndian.Uint16(b[2:]) & nlaTypeMask, b[4:l], b[min(len(b), (l+3)&^3):], true
}

// decodeCtEvent reads an event's key (the original source and port,
// and the reply's source and port, which is the destination after
// DNAT) and its counters into e.
func decodeCtEvent(e *ctEvent, b []byte) bool {
	var orig, reply ctTuple
	var haveOrig, haveReply bool
	for typ, v, rest, ok := nextAttr(b); ok; typ, v, rest, ok = nextAttr(rest) {
		switch typ {
		case ctaTupleOrig:
			haveOrig = decodeTuple(&orig, v)
		case ctaTupleReply:
			haveReply = decodeTuple(&reply, v)
		case ctaCountersOrig:
			e.counts.pktsOut, e.counts.bytesOut = decodeCounters(v)
		case ctaCountersReply:
			e.counts.pktsIn, e.counts.bytesIn = decodeCounters(v)
		}
	}
	if !haveOrig || !haveReply {
		return false
	}
	e.key = newFlowKey(orig.src, reply.src, orig.proto, orig.sport, reply.sport)
	if orig.proto == unix.IPPROTO_ICMP || orig.proto == unix.IPPROTO_ICMPV6 {
		e.key.sport, e.key.dport = orig.icmpID, uint16(orig.icmpType)
	}
	return true
}

// decodeTuple reads a CTA_TUPLE_ORIG or CTA_TUPLE_REPLY into t; false
// when it holds no source address.
func decodeTuple(t *ctTuple, b []byte) (ok bool) {
	for typ, v, rest, more := nextAttr(b); more; typ, v, rest, more = nextAttr(rest) {
		switch typ {
		case ctaTupleIP:
			for at, av, arest, amore := nextAttr(v); amore; at, av, arest, amore = nextAttr(arest) {
				switch {
				case at == ctaIPv4Src && len(av) == 4:
					t.src, ok = netip.AddrFrom4([4]byte(av)), true
				case at == ctaIPv6Src && len(av) == 16:
					t.src, ok = netip.AddrFrom16([16]byte(av)), true // an IPv4-mapped one stays IPv6
				}
			}
		case ctaTupleProto:
			for pt, pv, prest, pmore := nextAttr(v); pmore; pt, pv, prest, pmore = nextAttr(prest) {
				switch {
				case pt == ctaProtoNum && len(pv) >= 1:
					t.proto = pv[0]
				case pt == ctaProtoSrcPort && len(pv) >= 2:
					t.sport = binary.BigEndian.Uint16(pv)
				case (pt == ctaProtoICMPID || pt == ctaProtoICMPv6ID) && len(pv) >= 2:
					t.icmpID = binary.BigEndian.Uint16(pv)
				case (pt == ctaProtoICMPType || pt == ctaProtoICMPv6Type) && len(pv) >= 1:
					t.icmpType = pv[0]
				}
			}
		}
	}
	return ok
}

// decodeCounters reads a CTA_COUNTERS_ORIG or CTA_COUNTERS_REPLY.
func decodeCounters(b []byte) (packets, bytes uint64) {
	for typ, v, rest, ok := nextAttr(b); ok; typ, v, rest, ok = nextAttr(rest) {
		switch {
		case typ == ctaCountersPackets && len(v) == 8:
			packets = binary.BigEndian.Uint64(v)
		case typ == ctaCountersBytes && len(v) == 8:
			bytes = binary.BigEndian.Uint64(v)
		}
	}
	return packets, bytes
}
