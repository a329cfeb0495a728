package nftdp_test

import (
	"encoding/binary"
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

// TestWorkloadEncapsulationDropped: pod A wraps a datagram from pod C's
// address to pod B (whose ingress admits only C) in VXLAN and sends it,
// from its own address, to the node's VXLAN device. The device unwraps
// it and the inner packet arrives on the tunnel, where the pods'
// reverse-path check does not look: with the node's VXLAN port not in
// the dataplane's encapsulation drop, B receives it (the hole, shown
// first, IPv4 and IPv6 inside); with the port in, the outer datagram
// is dropped (wl-encap/to-host counted), and C's own datagrams still
// reach B. UDP to that port forwarded to another pod, and IPIP to the
// host, are dropped too (wl-encap/egress, wl-encap/to-host), while A's
// other traffic passes. Real packets between namespaces.
func TestWorkloadEncapsulationDropped(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-ena", "10.73.0.1", "fd00:73::1")
	b := node.AddPod(t, "cali-enb", "10.73.0.2", "fd00:73::2")
	c := node.AddPod(t, "cali-enc", "10.73.0.3", "fd00:73::3")
	const vxPort, port, srcPort = 4800, 7373, 41737
	mac := addVXLAN(t, node, "vxenc", vxPort)
	sinkB := polab.NewUDPSink(t, b.NS, port)
	sinkC := polab.NewUDPSink(t, c.NS, vxPort)

	d := newDP(t, node)
	d.AddSet("from-c", nftdp.AddrSet)
	for _, p := range c.Prefixes() {
		d.AddMember("from-c", nftdp.Member{Prefix: p})
	}
	if err := d.SetChain("b-in", []nftdp.Rule{
		{Src: nftdp.Side{Sets: []string{"from-c"}}, Action: nftdp.ActAccept},
		{Action: nftdp.ActDrop},
	}); err != nil {
		t.Fatal(err)
	}
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(a.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	d.SetEndpoint(c.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	d.SetEndpoint(b.Iface, "allow-all", "b-in", nftdp.BothFamilies)
	// Another port than the device's: the hole is open.
	if !d.SetWorkloadEncapPorts([]uint16{9}) {
		t.Fatal("SetWorkloadEncapPorts([9]) reported no change from the default")
	}
	applyResyncNoop(t, d, "policies")

	counter := func(id string) uint64 {
		t.Helper()
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs[id].Packets
	}
	hostVX := netip.AddrPortFrom(netip.MustParseAddr(polab.HostIPv4), vxPort)
	sendInner := func(v6 bool, payload string) {
		t.Helper()
		inner := innerUDP(c.Addr(v6), b.Addr(v6), srcPort, port, payload)
		polab.SendUDP(t, a.NS, a.IPv4, srcPort, hostVX, string(vxlanFrame(mac, v6, inner)))
	}

	for _, v6 := range []bool{false, true} {
		fam := map[bool]string{false: "v4", true: "v6"}[v6]
		open := "open " + fam
		nstest.Eventually(t, 10*time.Second, func() string {
			if src, ok := sinkB.Has(open); ok {
				if src != c.Addr(v6).String() {
					return fmt.Sprintf("%s: arrived from %s", open, src)
				}
				return ""
			}
			sendInner(v6, open)
			return open + ": the inner datagram never reached B with the VXLAN port open (the lab does not show the hole)"
		})
	}

	if !d.SetWorkloadEncapPorts([]uint16{vxPort}) {
		t.Fatal("SetWorkloadEncapPorts reported no change")
	}
	if d.SetWorkloadEncapPorts([]uint16{vxPort, vxPort}) {
		t.Error("SetWorkloadEncapPorts with the same port reported a change")
	}
	applyResyncNoop(t, d, "encapsulation ports")

	for _, v6 := range []bool{false, true} {
		fam := map[bool]string{false: "v4", true: "v6"}[v6]
		closed := "closed " + fam
		before := counter("wl-encap/to-host")
		sendInner(v6, closed)
		nstest.Eventually(t, 5*time.Second, func() string {
			if src, ok := sinkB.Has(closed); ok {
				return fmt.Sprintf("%s: B received the inner datagram from %s", closed, src)
			}
			if n := counter("wl-encap/to-host"); n <= before {
				return fmt.Sprintf("%s: counter wl-encap/to-host still %d", closed, n)
			}
			return ""
		})
		// C's own datagrams still reach B, and the wrapped one, sent
		// before them, has not turned up late.
		real := "real " + fam
		nstest.Eventually(t, 10*time.Second, func() string {
			if _, ok := sinkB.Has(real); ok {
				return ""
			}
			polab.SendUDP(t, c.NS, c.Addr(v6), srcPort+1, netip.AddrPortFrom(b.Addr(v6), port), real)
			return real + ": C's own datagram never reached B"
		})
		if src, ok := sinkB.Has(closed); ok {
			t.Errorf("%s: B received the inner datagram from %s", closed, src)
		}
	}

	// Forwarded: UDP to the VXLAN port of another pod is dropped at
	// egress; to another port it passes.
	for _, v6 := range []bool{false, true} {
		fam := map[bool]string{false: "v4", true: "v6"}[v6]
		wrapped := "to C's vxlan port " + fam
		before := counter("wl-encap/egress")
		polab.SendUDP(t, a.NS, a.Addr(v6), srcPort, netip.AddrPortFrom(c.Addr(v6), vxPort), wrapped)
		nstest.Eventually(t, 5*time.Second, func() string {
			if _, ok := sinkC.Has(wrapped); ok {
				return wrapped + ": C received it"
			}
			if n := counter("wl-encap/egress"); n <= before {
				return fmt.Sprintf("%s: counter wl-encap/egress still %d", wrapped, n)
			}
			return ""
		})
	}
	sinkC2 := polab.NewUDPSink(t, c.NS, vxPort+1)
	nstest.Eventually(t, 10*time.Second, func() string {
		if _, ok := sinkC2.Has("other port"); ok {
			return ""
		}
		polab.SendUDP(t, a.NS, a.IPv4, srcPort, netip.AddrPortFrom(c.IPv4, vxPort+1), "other port")
		return "A's datagram to another port of C never arrived"
	})

	// IPIP to the host: a raw IPPROTO_IPIP socket on the node would get
	// it (raw delivery follows the input hook); the drop counts it.
	got := rawIPIPSink(t, node)
	before := counter("wl-encap/to-host")
	a.Do(t, func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_IPIP)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		inner := innerUDP(c.IPv4, b.IPv4, srcPort, port, "ipip")
		var sa syscall.SockaddrInet4
		copy(sa.Addr[:], net.ParseIP(polab.HostIPv4).To4())
		return syscall.Sendto(fd, inner, 0, &sa)
	})
	nstest.Eventually(t, 5*time.Second, func() string {
		if n := counter("wl-encap/to-host"); n <= before {
			return fmt.Sprintf("IPIP: counter wl-encap/to-host still %d", n)
		}
		return ""
	})
	if n := got(); n != 0 {
		t.Errorf("IPIP: the node's raw socket received %d packets from A", n)
	}
}

// addVXLAN adds a VXLAN device (VNI 4096 on port) to the node with an
// address, as felix's vxlan.routed, and returns its MAC.
func addVXLAN(t *testing.T, node *polab.Node, name string, port int) net.HardwareAddr {
	t.Helper()
	v := &netlink.Vxlan{LinkAttrs: netlink.LinkAttrs{Name: name}, VxlanId: 4096, Port: port, Learning: false}
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
	node.AddAddr(t, name, "10.73.255.1/32")
	return l.Attrs().HardwareAddr
}

// vxlanFrame is a VXLAN payload (VNI 4096) carrying an Ethernet frame to
// dst with the IP packet inner.
func vxlanFrame(dst net.HardwareAddr, v6 bool, inner []byte) []byte {
	b := []byte{0x08, 0, 0, 0, 0x00, 0x10, 0x00, 0}
	b = append(b, dst...)
	b = append(b, 0x02, 0, 0, 0, 0x73, 0x01)
	if v6 {
		b = append(b, 0x86, 0xdd)
	} else {
		b = append(b, 0x08, 0x00)
	}
	return append(b, inner...)
}

// innerUDP is an IP packet (of src's family) with one UDP datagram.
func innerUDP(src, dst netip.Addr, sport, dport int, payload string) []byte {
	udp := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], uint16(sport))
	binary.BigEndian.PutUint16(udp[2:], uint16(dport))
	binary.BigEndian.PutUint16(udp[4:], uint16(8+len(payload)))
	udp = append(udp, payload...)
	if src.Is4() {
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(udp)))
		binary.BigEndian.PutUint16(ip[6:], 0x4000)
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		binary.BigEndian.PutUint16(ip[10:], polab.Checksum(ip))
		return append(ip, udp...) // UDP checksum 0: none, in IPv4
	}
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, 17, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(len(udp)))
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	pseudo := append(append(append([]byte{}, s[:]...), d[:]...), 0, 0, byte(len(udp)>>8), byte(len(udp)), 0, 0, 0, 17)
	cs := polab.Checksum(append(pseudo, udp...))
	if cs == 0 {
		cs = 0xffff
	}
	binary.BigEndian.PutUint16(udp[6:], cs)
	return append(ip, udp...)
}

// rawIPIPSink opens a raw IPPROTO_IPIP socket on the node and returns
// how many packets it has read so far.
func rawIPIPSink(t *testing.T, node *polab.Node) func() int {
	t.Helper()
	var fd int
	node.Do(t, func() error {
		var err error
		fd, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW|syscall.SOCK_NONBLOCK, syscall.IPPROTO_IPIP)
		return err
	})
	t.Cleanup(func() { syscall.Close(fd) })
	n := 0
	buf := make([]byte, 2048)
	return func() int {
		for {
			if _, _, err := syscall.Recvfrom(fd, buf, 0); err != nil {
				return n
			}
			n++
		}
	}
}
