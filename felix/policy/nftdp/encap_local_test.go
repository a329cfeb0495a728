package nftdp_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestEncapFromNodeItselfDropped is the review's scenario: pod B admits
// only remote pod R (10.74.9.9, fd00:74:9::9); an unprivileged UDP
// socket in the node's own namespace (a hostNetwork pod) wraps a
// datagram from R to B in VXLAN and sends it to the node's VXLAN port at
// 127.0.0.1, ::1 and the node's own addresses. Before the check (no
// SetEncapSources yet) the device unwraps it and B receives it: the
// hole. Once the sources are set, every such frame is dropped and
// counted encap-src/not-node (they arrive on lo, which routed never
// tunnels over), while a member node's frames still reach B. A peer
// sending from one of the node's own addresses (IPv6 has no martian
// check for that) is dropped too, even with that address in the allowed
// sources. Real packets between namespaces.
func TestEncapFromNodeItselfDropped(t *testing.T) {
	l := newEncapLab(t, "cali-elb", "vxel", 4812, 4813)
	node := l.node
	spoofer := node.AddPeer(t, "elx0", 87)
	member := node.AddPeer(t, "eln0", 88)

	// A sender: from src in ns (the kernel picks a local address when
	// src is invalid) to the VXLAN device of dst's family at dst.
	type sender struct {
		name     string
		ns       *nstest.NS
		src, dst netip.Addr
	}
	send := func(s sender, innerV6 bool) func(string) {
		return func(payload string) {
			t.Helper()
			port, data := l.frame(s.dst.Is6(), innerV6, payload)
			polab.SendUDP(t, s.ns, s.src, 0, netip.AddrPortFrom(s.dst, port), data)
		}
	}
	msg := func(tag string, s sender, innerV6 bool) string {
		return fmt.Sprintf("%s %s inner-v6=%v", tag, s.name, innerV6)
	}
	local := []sender{
		{"127.0.0.1->127.0.0.1", node.NS, netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.1")},
		{"node->node-v4", node.NS, netip.Addr{}, member.NodeIPv4},
		{"node->host-v4", node.NS, netip.Addr{}, netip.MustParseAddr(polab.HostIPv4)},
		{"::1->::1", node.NS, netip.MustParseAddr("::1"), netip.MustParseAddr("::1")},
		{"node->node-v6", node.NS, netip.Addr{}, member.NodeIPv6},
	}

	// The hole: the node's own frames are unwrapped.
	for _, s := range local {
		l.arrives(msg("open", s, false), false, send(s, false))
	}

	// The sources hold the member and the node's own addresses on the
	// peers' links (as an externalNodesList range covering the node
	// would).
	l.d.SetEncapSources([]netip.Prefix{
		netip.PrefixFrom(member.IPv4, 32), netip.PrefixFrom(member.IPv6, 128),
		netip.PrefixFrom(spoofer.NodeIPv4, 32), netip.PrefixFrom(spoofer.NodeIPv6, 128),
		netip.PrefixFrom(member.NodeIPv4, 32), netip.PrefixFrom(member.NodeIPv6, 128),
	})
	applyResyncNoop(t, l.d, "encapsulation sources")
	for _, s := range local {
		for _, innerV6 := range []bool{false, true} {
			l.dropped(msg("closed", s, innerV6), send(s, innerV6))
		}
	}
	for _, outerV6 := range []bool{false, true} {
		s := sender{fmt.Sprintf("member outer-v6=%v", outerV6), member.NS, member.Addr(outerV6), member.NodeAddr(outerV6)}
		l.arrives(msg("passes", s, false), false, send(s, false))
	}

	// A peer posing as the node: IPv6 from the node's address on the
	// peer's link (bound with ip_nonlocal_bind) to another of the
	// node's addresses. The kernel does not drop a local source from
	// outside over IPv6; the check does.
	spoofer.Do(t, func() error {
		return os.WriteFile("/proc/sys/net/ipv6/ip_nonlocal_bind", []byte("1"), 0o644)
	})
	s := sender{"peer-as-node-v6", spoofer.NS, spoofer.NodeIPv6, member.NodeIPv6}
	l.dropped(msg("spoofed", s, false), send(s, false))
}
