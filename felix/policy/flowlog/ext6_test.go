package flowlog

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// v6Packet builds an IPv6 packet by hand: the fixed header with next
// header first, then the given extension headers and the upper-layer
// bytes, and sets the payload length.
func v6Packet(first uint8, rest ...[]byte) []byte {
	b := make([]byte, 40)
	b[0], b[6], b[7] = 0x60, first, 64
	copy(b[8:], netip.MustParseAddr("fd00:39::1").AsSlice())
	copy(b[24:], netip.MustParseAddr("fd00:39::2").AsSlice())
	for _, r := range rest {
		b = append(b, r...)
	}
	binary.BigEndian.PutUint16(b[4:], uint16(len(b)-40))
	return b
}

// optsHeader is a Hop-by-Hop or Destination Options header of
// 8*(units+1) bytes, padded with PadN.
func optsHeader(next uint8, units int) []byte {
	h := make([]byte, 8*(units+1))
	h[0], h[1] = next, byte(units)
	h[2], h[3] = 1, byte(len(h)-4) // PadN over the rest
	return h
}

// routingHeader is a type 4 (segment routing) header with one segment.
func routingHeader(next uint8) []byte {
	h := make([]byte, 24)
	h[0], h[1], h[2], h[3] = next, 2, 4, 0
	copy(h[8:], netip.MustParseAddr("fd00:39::2").AsSlice())
	return h
}

// fragHeader is a Fragment header at offset (in 8-byte units).
func fragHeader(next uint8, offset uint16, more bool) []byte {
	h := make([]byte, 8)
	h[0] = next
	v := offset << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(h[2:], v)
	binary.BigEndian.PutUint32(h[4:], 0x39393939)
	return h
}

// nhAuth is AH, where nftables stops walking (see isExtHeader).
const nhAuth = 51

// authHeader is an AH with a 96-bit ICV: 24 bytes, length field 4
// ((4+2)*4, unlike the 8-byte units of the others).
func authHeader(next uint8) []byte {
	h := make([]byte, 24)
	h[0], h[1] = next, 4
	binary.BigEndian.PutUint32(h[4:], 0x100) // SPI
	binary.BigEndian.PutUint32(h[8:], 1)     // sequence
	return h
}

// tcpSYN is a 20-byte TCP header 12345 -> 443.
func tcpSYN() []byte {
	h := make([]byte, 20)
	binary.BigEndian.PutUint16(h, 12345)
	binary.BigEndian.PutUint16(h[2:], 443)
	h[12], h[13] = 5<<4, 0x02
	return h
}

func udpHeader() []byte {
	h := make([]byte, 8)
	binary.BigEndian.PutUint16(h, 5353)
	binary.BigEndian.PutUint16(h[2:], 53)
	binary.BigEndian.PutUint16(h[4:], 8)
	return h
}

func echoRequest() []byte { return []byte{128, 0, 0, 0, 0x12, 0x34, 0, 1} }

// want is what a case expects of ParseFlow.
type want struct {
	proto            uint8
	sport, dport     uint16
	icmpType, icmpID int
	fragment, incomp bool
}

// tcpNoPorts: TCP found, but too few bytes after it for the ports.
var tcpNoPorts = want{proto: 6, icmpType: -1, icmpID: -1}

func TestParseFlowIPv6ExtensionHeaders(t *testing.T) {
	tcp := want{proto: 6, sport: 12345, dport: 443, icmpType: -1, icmpID: -1}
	many := [][]byte{}
	for range MaxExtHeaders - 1 {
		many = append(many, optsHeader(nhDestOpts, 0))
	}
	tooMany := append(append([][]byte{}, many...), optsHeader(nhDestOpts, 0), optsHeader(6, 0), tcpSYN())
	many = append(many, optsHeader(6, 0), tcpSYN())
	cases := []struct {
		name string
		pkt  []byte
		want want
	}{
		{"no extension header", v6Packet(6, tcpSYN()), tcp},
		// The review's packet: TCP 12345->443 behind Destination Options.
		{"destination options", v6Packet(nhDestOpts, optsHeader(6, 0), tcpSYN()), tcp},
		{"destination options, 3 units", v6Packet(nhDestOpts, optsHeader(6, 3), tcpSYN()), tcp},
		{"hop-by-hop", v6Packet(nhHopByHop, optsHeader(6, 0), tcpSYN()), tcp},
		{"routing", v6Packet(nhRouting, routingHeader(6), tcpSYN()), tcp},
		{"first fragment", v6Packet(nhFragment, fragHeader(6, 0, true), tcpSYN()), tcp},
		// nftables stops at AH: the policy sees protocol 51, no ports.
		{"AH ends the walk", v6Packet(nhAuth, authHeader(6), tcpSYN()), want{proto: 51, icmpType: -1, icmpID: -1}},
		{"AH after the others", v6Packet(nhHopByHop, optsHeader(nhDestOpts, 0), optsHeader(nhAuth, 1), authHeader(6), tcpSYN()),
			want{proto: 51, icmpType: -1, icmpID: -1}},
		{"the RFC 8200 order, all kinds walked",
			v6Packet(nhHopByHop, optsHeader(nhDestOpts, 0), optsHeader(nhRouting, 1), routingHeader(nhFragment),
				fragHeader(nhDestOpts, 0, true), optsHeader(17, 0), udpHeader()),
			want{proto: 17, sport: 5353, dport: 53, icmpType: -1, icmpID: -1}},
		{"ICMPv6 echo behind hop-by-hop", v6Packet(nhHopByHop, optsHeader(58, 0), echoRequest()),
			want{proto: 58, icmpType: 128, icmpID: 0x1234}},
		{"MaxExtHeaders headers", v6Packet(nhDestOpts, many...), tcp},
		// Not walked by the kernel either: keyed as their own protocol.
		{"mobility", v6Packet(135, []byte{59, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
			want{proto: 135, icmpType: -1, icmpID: -1}},
		{"ESP ends the walk", v6Packet(nhDestOpts, optsHeader(50, 0), []byte{0, 0, 1, 0, 0, 0, 0, 1}),
			want{proto: 50, icmpType: -1, icmpID: -1}},
		{"no next header", v6Packet(nhDestOpts, optsHeader(nhNone, 0)), want{proto: 59, icmpType: -1, icmpID: -1}},
		{"later fragment", v6Packet(nhFragment, fragHeader(6, 185, false), tcpSYN()),
			want{proto: 6, icmpType: -1, icmpID: -1, fragment: true}},
		{"later fragment behind hop-by-hop", v6Packet(nhHopByHop, optsHeader(nhFragment, 0), fragHeader(17, 1, true), udpHeader()),
			want{proto: 17, icmpType: -1, icmpID: -1, fragment: true}},
		// Malformed and truncated: stop, say so, read nothing further.
		{"options header cut", v6Packet(nhDestOpts, []byte{6, 0, 1, 2}), want{proto: 60, icmpType: -1, icmpID: -1, incomp: true}},
		{"nothing after the options", v6Packet(nhDestOpts, optsHeader(6, 0)), tcpNoPorts},
		{"options length 255, 16 bytes left", v6Packet(nhDestOpts, []byte{6, 255, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}),
			want{proto: 60, icmpType: -1, icmpID: -1, incomp: true}},
		{"routing length past the packet", v6Packet(nhRouting, routingHeader(6)[:16]), want{proto: 43, icmpType: -1, icmpID: -1, incomp: true}},
		{"fragment header cut", v6Packet(nhFragment, []byte{6, 0, 0}), want{proto: 44, icmpType: -1, icmpID: -1, incomp: true}},
		{"chain ends at the buffer", v6Packet(nhHopByHop), want{proto: 0, icmpType: -1, icmpID: -1, incomp: true}},
		{"TCP header cut", v6Packet(nhDestOpts, optsHeader(6, 0), []byte{0x30, 0x39}), tcpNoPorts},
		{"more than MaxExtHeaders", v6Packet(nhDestOpts, tooMany...), want{proto: 60, icmpType: -1, icmpID: -1, incomp: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, ok := ParseFlow(c.pkt)
			got := want{f.Proto, f.SrcPort, f.DstPort, f.ICMPType, f.ICMPID, f.Fragment, f.Incomplete}
			if !ok || got != c.want {
				t.Errorf("got %+v ok=%v, want %+v", got, ok, c.want)
			}
			if ok && (f.Src.String() != "fd00:39::1" || f.Dst.String() != "fd00:39::2") {
				t.Errorf("addresses %v -> %v", f.Src, f.Dst)
			}
		})
	}
}

// TestParseFlowEveryPrefix cuts a long chain at every length and
// checks that the parser neither panics nor invents ports: a prefix
// that ends before the TCP ports yields none (ParseFlow slices within
// its buffer, so a read past it would panic here).
func TestParseFlowEveryPrefix(t *testing.T) {
	full := v6Packet(nhHopByHop, optsHeader(nhRouting, 1), routingHeader(nhFragment), fragHeader(nhDestOpts, 0, true),
		optsHeader(6, 2), tcpSYN())
	portsAt := len(full) - 20 + 4
	for n := 0; n <= len(full); n++ {
		f, ok := ParseFlow(full[:n:n])
		if n < 40 {
			if ok {
				t.Errorf("%d bytes: parsed", n)
			}
			continue
		}
		if !ok {
			t.Fatalf("%d bytes: not parsed", n)
		}
		if n >= portsAt != (f.DstPort == 443 && f.SrcPort == 12345 && f.Proto == 6) {
			t.Errorf("%d bytes: %+v", n, f)
		}
		if f.Proto != 6 && !f.Incomplete {
			t.Errorf("%d bytes: stopped at %d without saying so", n, f.Proto)
		}
	}
}

// FuzzParseFlow: whatever the bytes, no panic, and no ports without an
// upper-layer header that holds them.
func FuzzParseFlow(f *testing.F) {
	f.Add(v6Packet(nhDestOpts, optsHeader(6, 0), tcpSYN()))
	f.Add(v6Packet(nhAuth, authHeader(nhFragment), fragHeader(17, 0, false), udpHeader()))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, ok := ParseFlow(b)
		if !ok && (fl.SrcPort != 0 || fl.DstPort != 0) {
			t.Errorf("ports on a refused packet: %+v", fl)
		}
		if (fl.Fragment || fl.Incomplete) && (fl.SrcPort != 0 || fl.DstPort != 0 || fl.ICMPType >= 0) {
			t.Errorf("ports without a transport header: %+v", fl)
		}
	})
}

// BenchmarkParseFlow: the cost of the walk per logged packet.
func BenchmarkParseFlow(b *testing.B) {
	for _, c := range []struct {
		name string
		pkt  []byte
	}{
		{"v6 TCP", v6Packet(6, tcpSYN())},
		{"v6 TCP behind 3 headers", v6Packet(nhHopByHop, optsHeader(nhDestOpts, 0), optsHeader(nhRouting, 1), routingHeader(6), tcpSYN())},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if f, _ := ParseFlow(c.pkt); f.DstPort != 443 {
					b.Fatal(f)
				}
			}
		})
	}
}
