package nftdp

import (
	"net/netip"
	"testing"
)

// TestMemberMapKeepsEveryMember: members of both families, prefixes,
// named ports and the zero prefix come back from a memberMap exactly as
// they went in, and an IPv4-mapped IPv6 address stays apart from the
// IPv4 address it maps.
func TestMemberMapKeepsEveryMember(t *testing.T) {
	ms := []Member{
		{Prefix: netip.MustParsePrefix("10.0.0.1/32")},
		{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: 6, Port: 8080},
		{Prefix: netip.MustParsePrefix("10.0.0.1/32"), Proto: 17, Port: 8080},
		{Prefix: netip.MustParsePrefix("255.255.255.255/32"), Proto: 132, Port: 65535},
		{Prefix: netip.MustParsePrefix("10.0.0.0/8")},
		{Prefix: netip.MustParsePrefix("0.0.0.0/0")},
		{Prefix: netip.MustParsePrefix("::ffff:10.0.0.1/128")},
		{Prefix: netip.MustParsePrefix("fd00::1/128"), Proto: 6, Port: 443},
		{Prefix: netip.MustParsePrefix("fd00::/64")},
		{},
	}
	var m memberMap[int32]
	for i, mb := range ms {
		if m.has(mb.key()) {
			t.Fatalf("%v in the map before it was put", mb)
		}
		m.put(mb.key(), int32(i+1))
	}
	if m.len() != len(ms) {
		t.Fatalf("len %d, want %d", m.len(), len(ms))
	}
	seen := map[mkey]int32{}
	for k, v := range m.all() {
		seen[k] = v
	}
	for i, mb := range ms {
		if got, ok := m.get(mb.key()); !ok || got != int32(i+1) {
			t.Errorf("get(%v) = %d, %v; want %d", mb, got, ok, i+1)
		}
		if seen[mb.key()] != int32(i+1) {
			t.Errorf("all() gave %v as %d, want %d", mb, seen[mb.key()], i+1)
		}
		if back := mb.key().member(); back != mb {
			t.Errorf("member of key of %v = %v", mb, back)
		}
	}
	for _, mb := range ms[:3] {
		m.del(mb.key())
	}
	if m.len() != len(ms)-3 || m.has(ms[0].key()) || !m.has(ms[3].key()) {
		t.Fatalf("after 3 deletions: len %d, has %v: %v", m.len(), ms[0], m.has(ms[0].key()))
	}
	m.clear()
	if m.len() != 0 {
		t.Fatalf("len %d after clear", m.len())
	}
}
