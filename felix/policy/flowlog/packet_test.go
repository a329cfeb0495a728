package flowlog

import (
	"net/netip"
	"testing"
)

func TestParseFlow(t *testing.T) {
	v4 := []byte{0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 65, 0, 1, 10, 65, 0, 2, 0xa4, 0x10, 0x1f, 0x90}
	f, ok := ParseFlow(v4)
	if !ok || f.Src != netip.MustParseAddr("10.65.0.1") || f.Dst != netip.MustParseAddr("10.65.0.2") || f.Proto != 6 ||
		f.SrcPort != 42000 || f.DstPort != 8080 || f.ICMPType != -1 {
		t.Errorf("IPv4 TCP: %+v %v", f, ok)
	}
	frag := append([]byte{}, v4...)
	frag[6], frag[7] = 0, 10 // a later fragment: no transport header
	if f, ok := ParseFlow(frag); !ok || f.SrcPort != 0 || f.DstPort != 0 {
		t.Errorf("fragment: %+v %v", f, ok)
	}
	v6 := make([]byte, 48)
	v6[0], v6[6] = 0x60, 58
	copy(v6[8:], netip.MustParseAddr("fd00:65::1").AsSlice())
	copy(v6[24:], netip.MustParseAddr("fd00:65::2").AsSlice())
	v6[40], v6[41] = 128, 0
	if f, ok := ParseFlow(v6); !ok || f.Src.String() != "fd00:65::1" || f.Proto != 58 || f.ICMPType != 128 || f.ICMPCode != 0 {
		t.Errorf("ICMPv6: %+v %v", f, ok)
	}
	if _, ok := ParseFlow([]byte{0x45, 0}); ok {
		t.Error("a truncated header parsed")
	}
	if ProtoName(6) != "TCP" || ProtoName(47) != "47" {
		t.Error("ProtoName")
	}
}
