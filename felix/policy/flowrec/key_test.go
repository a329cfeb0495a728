package flowrec

import (
	"net/netip"
	"testing"
)

// TestKeyOfPacketIPv6ExtensionHeader: the review's packet, a TCP SYN
// 12345->443 behind a Destination Options header, is keyed TCP with
// its ports, as conntrack keys it (it was protocol 60, ports 0); an
// ICMPv6 echo behind Hop-by-Hop options is keyed by its identifier.
func TestKeyOfPacketIPv6ExtensionHeader(t *testing.T) {
	p := make([]byte, 40+8+20)
	p[0] = 0x60
	p[6] = 60 // next header: destination options
	p[8+15] = 1
	p[24+15] = 2
	p[40] = 6                 // dest opts: next header TCP, length 0 (8 bytes)
	p[48], p[49] = 0x30, 0x39 // sport 12345
	p[50], p[51] = 0x01, 0xbb // dport 443
	k, ok := keyOfPacket(p)
	if !ok || k.proto != 6 || k.sport != 12345 || k.dport != 443 ||
		k.srcAddr() != netip.MustParseAddr("::1") || k.dstAddr() != netip.MustParseAddr("::2") {
		t.Errorf("TCP behind destination options: %+v ok=%v", k, ok)
	}

	e := make([]byte, 40+8+8)
	e[0], e[6] = 0x60, 0 // hop-by-hop
	e[40] = 58           // then ICMPv6
	e[48], e[52], e[53] = 128, 0xab, 0xcd
	k, ok = keyOfPacket(e)
	if !ok || k.proto != 58 || k.dport != 128 || k.sport != 0xabcd {
		t.Errorf("echo behind hop-by-hop: %+v ok=%v", k, ok)
	}
}
