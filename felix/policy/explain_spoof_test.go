package policy

import (
	"net/netip"
	"testing"
)

// TestExplainSpoofedSource: a flow whose sender (Flow.From) is pod a
// and whose source is not a's is dropped at a's egress by the
// reverse-path check, whatever the policies say (the same flow from c
// itself is allowed), and its ingress is never reached. A sender's own
// addresses, link-local sources, :: for DAD and MLD, and 0.0.0.0 to the
// broadcast address as a DHCP request, or as IGMP, pass the check, and the sender's egress policy
// decides them (the kernel picks it by interface); 0.0.0.0 to a pod,
// nobody's addresses, :: for anything else and the IPv4-mapped IPv6
// form of its own do not; an unknown sender is refused.
func TestExplainSpoofedSource(t *testing.T) {
	m := stagedModel(t)
	fromC := tcpFlow(3, 2, 8080)
	if x := m.Explain(fromC); !x.Allowed() {
		t.Fatalf("c's own flow to b:8080 should be allowed: %+v", x)
	}
	spoofed := fromC
	spoofed.From = "ep-a"
	x := m.Explain(spoofed)
	if x.Allowed() || x.Egress.Allowed || x.Egress.Rule.Kind != KindSpoofedSource || x.Egress.Rule.ID != "spoofed-src/egress" ||
		x.Egress.Endpoint != "ep-a" || x.Egress.Node != "n1" || !x.Egress.Policed {
		t.Errorf("a sending from c's address: egress %+v", x.Egress)
	}
	if x.Ingress.Allowed || x.Ingress.Rule.Kind != KindNotReached || x.Ingress.Endpoint != "ep-b" {
		t.Errorf("a sending from c's address: ingress %+v", x.Ingress)
	}

	// d, dual-stack in prod (whose profile allows its egress), sends.
	m.SetEndpoint(Endpoint{Key: "ep-d", Node: "n1", Namespace: "prod", Labels: map[string]string{"app": "d"}, Profiles: []string{"kns.prod"},
		IPs: []netip.Prefix{netip.MustParsePrefix("10.0.0.4/32"), netip.MustParsePrefix("fd00::4/128")}})
	addr := netip.MustParseAddr
	for _, tc := range []struct {
		name     string
		src, dst netip.Addr
		proto    uint8
		port     uint16
		spoofed  bool
	}{
		{"d's own address", addr("10.0.0.4"), addr("10.0.0.2"), 6, 8080, false},
		{"d's own IPv6 address", addr("fd00::4"), addr("fd00::2"), 6, 8080, false},
		{"nobody's address", addr("10.9.9.9"), addr("10.0.0.2"), 6, 8080, true},
		{"the unspecified address to the broadcast (DHCP)", addr("0.0.0.0"), addr("255.255.255.255"), 17, 67, false},
		{"the unspecified address to local multicast (DHCP)", addr("0.0.0.0"), addr("224.0.0.1"), 17, 67, false},
		{"the unspecified address, IGMP", addr("0.0.0.0"), addr("224.0.0.22"), 2, 0, false},
		{"the unspecified address, mDNS to local multicast", addr("0.0.0.0"), addr("224.0.0.251"), 17, 5353, true},
		{"the unspecified address, UDP to the broadcast not DHCP", addr("0.0.0.0"), addr("255.255.255.255"), 17, 7676, true},
		{"the unspecified address to a pod", addr("0.0.0.0"), addr("10.0.0.2"), 6, 8080, true},
		{"IPv6 link-local", addr("fe80::a"), addr("fe80::1"), 58, 0, false},
		{"IPv6 link-local outside fe80::/64", addr("fe80:1::a"), addr("fe80::1"), 58, 0, true},
		{"IPv6 unspecified (DAD)", addr("::"), addr("ff02::1:ff00:1"), 58, 135, false},
		{"IPv6 unspecified (MLDv2 report)", addr("::"), addr("ff02::16"), 58, 143, false},
		{"IPv6 unspecified, an echo request", addr("::"), addr("fd00::2"), 58, 128, true},
		{"IPv6 unspecified, UDP", addr("::"), addr("fd00::2"), 17, 53, true},
		{"an IPv6 address not d's", addr("fd00::3"), addr("fd00::2"), 6, 8080, true},
		{"the IPv4-mapped IPv6 form of d's address", addr("::ffff:10.0.0.4"), addr("fd00::2"), 6, 8080, true},
	} {
		f := Flow{Src: tc.src, Dst: tc.dst, Proto: tc.proto, DstPort: tc.port, ICMPType: -1, ICMPCode: -1, From: "ep-d"}
		if tc.proto == 58 { // port: the ICMPv6 type
			f.DstPort, f.ICMPType, f.ICMPCode = 0, int(tc.port), 0
		}
		if tc.proto == 17 && tc.port == 67 {
			f.SrcPort = 68 // a DHCP client's
		}
		x := m.Explain(f)
		if got := x.Egress.Rule.Kind == KindSpoofedSource; got != tc.spoofed {
			t.Errorf("%s: spoofed %v, want %v (egress %+v)", tc.name, got, tc.spoofed, x.Egress)
			continue
		}
		if tc.spoofed {
			continue
		}
		// d's namespace profile allows its egress.
		if x.Egress.Endpoint != "ep-d" || !x.Egress.Allowed || x.Egress.Rule.ID != "pro-kns.prod/0" {
			t.Errorf("%s: egress should be d's, allowed by its profile: %+v", tc.name, x.Egress)
		}
	}

	unknown := fromC
	unknown.From = "ep-nobody"
	if x := m.Explain(unknown); x.Allowed() || x.Egress.Rule.Kind != KindUnknownSender || x.Ingress.Rule.Kind != KindUnknownSender {
		t.Errorf("unknown sender: %+v", x)
	}
}
