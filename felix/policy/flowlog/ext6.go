package flowlog

// IPv6 extension headers, walked the way nftables walks them for
// `meta l4proto` and `th` (ipv6_find_hdr with IP6_FH_F_AUTH), so that
// a flow record names the protocol and ports the policy decided on and
// that conntrack keys the connection by.
const (
	nhHopByHop = 0
	nhRouting  = 43
	nhFragment = 44
	nhNone     = 59
	nhDestOpts = 60

	// MaxExtHeaders caps the extension headers ParseFlow walks. Each is
	// at least 8 bytes, so the walk ends with the buffer anyway; the cap
	// bounds the work on a chain crafted to be long. A packet with more
	// is reported Incomplete.
	MaxExtHeaders = 32
)

// isExtHeader reports whether nftables walks past next header nh:
// include/net/ipv6.h ipv6_ext_hdr, less No Next Header (59), which
// ends the chain, and less AH (51), where nftables stops (it asks
// ipv6_find_hdr for IP6_FH_F_AUTH): a TCP segment behind AH is
// protocol 51 to `meta l4proto` and no `th dport` matches it, so the
// policy decides it as protocol 51 and the record must say so
// (conntrack alone walks AH: such a mark does not join its entry).
// Mobility (135), HIP (139), Shim6 (140) and the experimental 253/254
// are not walked either: the kernel keys such a packet as that
// protocol. ESP (50) is opaque and ends the walk as well.
func isExtHeader(nh uint8) bool {
	switch nh {
	case nhHopByHop, nhRouting, nhFragment, nhDestOpts:
		return true
	}
	return false
}

// walkExt6 follows the extension header chain of the IPv6 packet b
// (b[40:] onwards). It returns the upper-layer protocol, the offset of
// its header in b, whether the packet is a non-first fragment (which
// carries no upper-layer header: off is then -1) and whether the walk
// stopped early (a header runs past b, or more than MaxExtHeaders):
// proto is then the next header the walk could not get past and off
// is -1. It reads nothing outside b.
func walkExt6(b []byte) (proto uint8, off int, laterFragment, incomplete bool) {
	nh, off := b[6], 40
	for n := 0; isExtHeader(nh); n++ {
		if n == MaxExtHeaders || len(b)-off < 8 {
			return nh, -1, false, true
		}
		h := b[off:]
		var size int
		switch nh {
		case nhFragment:
			// RFC 8200 4.5: fixed 8 bytes; the offset is in 8-byte units
			// in the top 13 bits of bytes 2-3.
			if (int(h[2])<<8|int(h[3]))&^7 != 0 {
				// A later fragment: the kernel reports the fragment
				// header's next header as the protocol, with no ports.
				return h[0], -1, true, false
			}
			size = 8
		default:
			// Hop-by-Hop, Routing, Destination Options (RFC 8200 4.3-4.6):
			// length in 8-byte units, not counting the first 8 bytes.
			size = (int(h[1]) + 1) * 8
		}
		if size > len(h) {
			return nh, -1, false, true
		}
		nh, off = h[0], off+size
	}
	return nh, off, false, false
}
