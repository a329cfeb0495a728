package nftdp

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRuleKeys(t *testing.T) {
	a := Rule{ID: "pi-gnp:x/0", Proto: 6, ICMP: &ICMPMatch{Type: 8, Code: -1}, Action: ActAccept}
	b := a
	b.ICMP = &ICMPMatch{Type: 8, Code: -1} // same content, another pointer
	if a.key() != b.key() {
		t.Error("equal rules have different keys")
	}
	b.ICMP.Code = 0
	if a.key() == b.key() {
		t.Error("different rules share a key")
	}
	long1, long2 := Rule{ID: strings.Repeat("x", 300) + "1"}, Rule{ID: strings.Repeat("x", 300) + "2"}
	k1, k2 := long1.key(), long2.key()
	if len(k1) > 230 || k1 == k2 || ruleID(k1) == ruleID(k2) {
		t.Errorf("long IDs: %d bytes, distinct %v", len(k1), ruleID(k1) != ruleID(k2))
	}
}

// TestMemberKey: the compact key the dataplane keeps members by gives
// back the member it was made from, and tells the families apart.
func TestMemberKey(t *testing.T) {
	for _, m := range []Member{
		{Prefix: netip.MustParsePrefix("10.1.2.3/32")},
		{Prefix: netip.MustParsePrefix("10.9.0.0/16")},
		{Prefix: netip.MustParsePrefix("fd00::5/128"), Proto: 6, Port: 8080},
		{Prefix: netip.MustParsePrefix("::ffff:10.1.2.3/128")},
		{Prefix: netip.MustParsePrefix("0.0.0.0/0")},
		{Prefix: netip.MustParsePrefix("::/0")},
		{},
	} {
		if got := m.key().member(); got != m {
			t.Errorf("%v: back from its key as %v", m, got)
		}
		if got, want := m.key().in(ipv4), m.Prefix.Addr().Is4(); got != want {
			t.Errorf("%v: in ip family %v, want %v", m, got, want)
		}
	}
	if (Member{Prefix: netip.MustParsePrefix("10.1.2.3/32")}).key() == (Member{Prefix: netip.MustParsePrefix("::ffff:10.1.2.3/128")}).key() {
		t.Error("an IPv4 address and its IPv4-mapped IPv6 address have one key")
	}
}
