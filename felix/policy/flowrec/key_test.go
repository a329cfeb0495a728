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

// TestKeyFamilies: an IPv6 connection from ::ffff:10.0.0.1 and an IPv4
// one from 10.0.0.1 on the same ports are two keys (a review found them
// one: a pod's IPv6 packets from mapped addresses were recorded as the
// IPv4 pods' flow and a denied one suppressed the real one's record),
// and each gives its addresses back as they were.
func TestKeyFamilies(t *testing.T) {
	v4 := newFlowKey(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), 17, 1000, 53)
	mapped := newFlowKey(netip.MustParseAddr("::ffff:10.0.0.1"), netip.MustParseAddr("::ffff:10.0.0.2"), 17, 1000, 53)
	if v4 == mapped {
		t.Fatalf("IPv4 and IPv4-mapped IPv6 connections have one key: %+v", v4)
	}
	if got := v4.srcAddr(); got != netip.MustParseAddr("10.0.0.1") || !got.Is4() {
		t.Errorf("IPv4 key's source %v, want 10.0.0.1", got)
	}
	if got := mapped.dstAddr(); got != netip.MustParseAddr("::ffff:10.0.0.2") {
		t.Errorf("IPv6 key's destination %v, want ::ffff:10.0.0.2", got)
	}
}
