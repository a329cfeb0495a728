package flowlog

// IPv6 extension headers, walked the way the kernel's ipv6_find_hdr
// (nftables' `meta l4proto` and `th`) and ipv6_skip_exthdr (conntrack)
// walk them, so that a flow record names the same protocol and ports
// as the rule that logged the packet and the conntrack entry it joins.
const (
	nhHopByHop = 0
	nhRouting  = 43
	nhFragment = 44
	nhAuth     = 51
	nhNone     = 59
	nhDestOpts = 60

	// MaxExtHeaders caps the extension headers ParseFlow walks. Each is
	// at least 8 bytes, so the walk ends with the buffer anyway; the cap
	// bounds the work on a chain crafted to be long. A packet with more
	// is reported Incomplete.
	MaxExtHeaders = 32
)

// isExtHeader reports whether the kernel walks past next header nh
// (include/net/ipv6.h ipv6_ext_hdr, less No Next Header, which ends
// the chain). Mobility (135), HIP (139), Shim6 (140) and the
// experimental 253/254 are not walked: nftables and conntrack key such
// a packet as that protocol, and so must the record, or it would
// neither match the rule that logged it nor join its conntrack entry.
// ESP (50) is opaque and ends the walk as the upper-layer protocol.
func isExtHeader(nh uint8) bool {
	switch nh {
	case nhHopByHop, nhRouting, nhFragment, nhAuth, nhDestOpts:
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
		case nhAuth:
			// RFC 4302 2.2: length in 4-byte units, minus 2.
			size = (int(h[1]) + 2) * 4
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
