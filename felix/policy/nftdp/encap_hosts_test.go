package nftdp_test

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestEncapFromStrangerDropped: pod B admits only remote pod R
// (10.74.9.9, fd00:74:9::9). A stranger on the node's network (no
// node's address) wraps a datagram from R's address to B in VXLAN and
// sends it to the node's VXLAN device, over IPv4 and over IPv6. With no
// outer-source check (the dataplane before SetEncapSources, i.e. the
// code before it), B receives it: the hole. Once the sources are set
// (a node's addresses and an external node range), the stranger's
// datagrams are dropped before the device unwraps them, counted
// encap-src/not-node, while the node's and the external range's
// still reach B; a node removed from the sources is dropped from then
// on, and passes again once it is back. IPIP from the stranger is
// dropped before the kernel's IPIP handlers (a raw protocol-4 socket on
// the node, which the packet would reach with them, gets nothing),
// while the node's IPIP reaches it. Real packets between namespaces.
func TestEncapFromStrangerDropped(t *testing.T) {
	l := newEncapLab(t, "cali-esb", "vxes", 4802, 4803)
	node, d := l.node, l.d
	stranger := node.AddPeer(t, "esx0", 77)
	member := node.AddPeer(t, "esn0", 78)
	external := node.AddPeer(t, "ese0", 79)
	counter := l.counter
	// send wraps a datagram from R to B (inner family innerV6) in VXLAN
	// from p over IPv4 (outerV6 false) or IPv6.
	send := func(p *polab.Peer, outerV6, innerV6 bool) func(string) {
		return func(payload string) {
			t.Helper()
			port, data := l.frame(outerV6, innerV6, payload)
			polab.SendUDP(t, p.NS, p.Addr(outerV6), encapLabSrcPort, netip.AddrPortFrom(p.NodeAddr(outerV6), port), data)
		}
	}
	type flow struct{ outerV6, innerV6 bool }
	flows := []flow{{false, false}, {false, true}, {true, false}, {true, true}}
	name := func(who string, f flow) string {
		return fmt.Sprintf("%s outer-v6=%v inner-v6=%v", who, f.outerV6, f.innerV6)
	}
	arrives := func(p *polab.Peer, tag string, f flow) {
		t.Helper()
		l.arrives(name(tag, f), f.innerV6, send(p, f.outerV6, f.innerV6))
	}
	dropped := func(p *polab.Peer, tag string, f flow) {
		t.Helper()
		l.dropped(name(tag, f), send(p, f.outerV6, f.innerV6))
	}

	// The hole: no check yet.
	for _, f := range flows {
		arrives(stranger, "open", f)
	}

	sources := []netip.Prefix{
		netip.PrefixFrom(member.IPv4, 32), netip.PrefixFrom(member.IPv6, 128),
		netip.MustParsePrefix("10.79.0.0/24"), netip.MustParsePrefix("fd00:79::/64"),
	}
	if !d.SetEncapSources(sources) {
		t.Fatal("SetEncapSources reported no change")
	}
	if d.SetEncapSources([]netip.Prefix{sources[3], sources[2], sources[1], sources[0], sources[0]}) {
		t.Error("the same sources in another order reported as a change")
	}
	applyResyncNoop(t, d, "encapsulation sources")
	for _, f := range flows {
		dropped(stranger, "stranger", f)
		arrives(member, "node", f)
		arrives(external, "external", f)
	}

	// The node leaves: its packets are dropped; it comes back: they pass.
	if !d.SetEncapSources(sources[2:]) {
		t.Fatal("removing a node reported no change")
	}
	applyResyncNoop(t, d, "a node removed")
	dropped(member, "gone node", flow{})
	d.SetEncapSources(sources)
	applyResyncNoop(t, d, "the node back")
	arrives(member, "node back", flow{})

	// IPIP: a raw protocol-4 socket on the node sees what the IPIP
	// handlers would unwrap (raw delivery follows the input hook).
	got := rawIPIPSink(t, node)
	sendIPIP := func(p *polab.Peer, payload string) {
		t.Helper()
		p.Do(t, func() error {
			fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_IPIP)
			if err != nil {
				return err
			}
			defer syscall.Close(fd)
			var sa syscall.SockaddrInet4
			copy(sa.Addr[:], net.IP(p.NodeIPv4.AsSlice()).To4())
			return syscall.Sendto(fd, innerUDP(l.remote[false], l.b.IPv4, encapLabSrcPort, encapLabPort, payload), 0, &sa)
		})
	}
	before := counter()
	sendIPIP(stranger, "ipip stranger")
	nstest.Eventually(t, 5*time.Second, func() string {
		if n := counter(); n <= before {
			return fmt.Sprintf("IPIP from the stranger: counter %s still %d", nftdp.EncapSrcDropID, n)
		}
		return ""
	})
	if n := got(); n != 0 {
		t.Errorf("IPIP from the stranger: the node's raw socket received %d packets", n)
	}
	seen := 0
	nstest.Eventually(t, 10*time.Second, func() string {
		if seen += got(); seen > 0 {
			return ""
		}
		sendIPIP(member, "ipip node")
		return "IPIP from the node never reached the node's raw socket"
	})
}

// addVXLAN6 adds a VXLAN device over IPv6 (VNI 4096 on port, local
// address the node's HostIPv6), as felix's vxlan-v6.routed, and returns
// its MAC.
func addVXLAN6(t *testing.T, node *polab.Node, name string, port int) net.HardwareAddr {
	t.Helper()
	v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name}, VxlanId: 4096, Port: port, Learning: false,
		SrcAddr: netip.MustParseAddr(polab.HostIPv6).AsSlice()}
	if err := node.Handle.LinkAdd(v); err != nil {
		t.Fatalf("adding %s: %v", name, err)
	}
	l, err := node.Handle.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Handle.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
	return l.Attrs().HardwareAddr
}
