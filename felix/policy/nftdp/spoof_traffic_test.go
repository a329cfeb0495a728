package nftdp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestSpoofedSynNotEstablished: pod a holds pod c's addresses and
// connects over TCP from them, to pod b (whose ingress admits only c)
// and to the node. A spoofer never gets the answer (the host routes it
// to c), so the proof is where that answer would go: had b or the node
// received a's SYN, its SYN/ACK would reach c's eth0; a capture there
// sees none while the spoofed-src counter rises with a's SYNs. c's own
// connection, open before, still echoes after, and c connects from the
// very address and port the spoofer used. IPv4 and IPv6.
func TestSpoofedSynNotEstablished(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-sya", "10.73.0.1", "fd00:73::1")
	b := node.AddPod(t, "cali-syb", "10.73.0.2", "fd00:73::2")
	c := node.AddPod(t, "cali-syc", "10.73.0.3", "fd00:73::3")
	const port, srcPort = 7373, 41737
	sinkB := newTCPSink(t, b.NS, port)
	sinkHost := newTCPSink(t, node.NS, port)
	synAcks := captureTCP(t, c.NS, "eth0")

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
	applyResyncNoop(t, d, "policies")

	// a resolves its IPv6 gateway from its own address first (its
	// neighbour solicitations take the source of the packet waiting, so
	// later ones could come from c's address and be dropped too).
	for _, v6 := range []bool{false, true} {
		conn := dialTCP(t, a.NS, a.Addr(v6), 0, netip.AddrPortFrom(hostAddr(v6), port), 5*time.Second)
		if conn == nil {
			t.Fatalf("a cannot reach the node from its own address (v6=%v)", v6)
		}
		conn.Close()
	}
	a.AddAddr(t, "eth0", c.IPv4.String()+"/32")
	a.AddAddr(t, "eth0", c.IPv6.String()+"/128")

	counter := func(id string) uint64 {
		t.Helper()
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs[id].Packets
	}
	for i, v6 := range []bool{false, true} {
		for j, dst := range []struct {
			name string
			addr netip.Addr
			sink *tcpSink
			id   string
		}{
			{"pod b", b.Addr(v6), sinkB, "spoofed-src/egress"},
			{"the node", hostAddr(v6), sinkHost, "spoofed-src/to-host"},
		} {
			what := fmt.Sprintf("%s v6=%v", dst.name, v6)
			to := netip.AddrPortFrom(dst.addr, port)
			sport := uint16(srcPort + 10*i + 2*j)
			// c's own connection, open across the spoofing.
			live := dialTCP(t, c.NS, c.Addr(v6), sport, to, 5*time.Second)
			if live == nil {
				t.Fatalf("%s: c cannot connect from its own address", what)
			}
			defer live.Close()
			echoTCP(t, live, what+": c's connection before")

			before := counter(dst.id)
			spoofedFrom := netip.AddrPortFrom(c.Addr(v6), sport+1)
			if conn := dialTCP(t, a.NS, spoofedFrom.Addr(), spoofedFrom.Port(), to, 1500*time.Millisecond); conn != nil {
				conn.Close()
				t.Fatalf("%s: a connected from c's address %s", what, spoofedFrom)
			}
			nstest.Eventually(t, 5*time.Second, func() string {
				if n := counter(dst.id); n <= before {
					return fmt.Sprintf("%s: %s still %d after a's SYNs from %s", what, dst.id, n, spoofedFrom)
				}
				return ""
			})

			// The real owner: its open connection still echoes, and it
			// connects from the address and port a spoofed.
			echoTCP(t, live, what+": c's connection after")
			again := dialTCP(t, c.NS, spoofedFrom.Addr(), spoofedFrom.Port(), to, 5*time.Second)
			if again == nil {
				t.Fatalf("%s: c cannot connect from %s after a's spoofed SYNs", what, spoofedFrom)
			}
			echoTCP(t, again, what+": c's new connection")
			again.Close()
			// Its SYN/ACK reached c's eth0, which the spoofed SYNs' never
			// did (the capture sees both: c's answer is the check that
			// it captures at all).
			nstest.Eventually(t, 5*time.Second, func() string {
				if synAcks.count(to, spoofedFrom) == 0 {
					return fmt.Sprintf("%s: the capture on c's eth0 never saw the SYN/ACK of c's own connection from %s", what, spoofedFrom)
				}
				return ""
			})
			if n := synAcks.count(to, spoofedFrom); n != 1 {
				t.Errorf("%s: c's eth0 saw %d SYN/ACKs from %s to %s, want 1 (its own connection's): %s answered a's spoofed SYN",
					what, n, to, spoofedFrom, dst.name)
			}
			if got := dst.sink.from(spoofedFrom); got != 1 {
				t.Errorf("%s: %d connections accepted from %s, want 1 (c's own)", what, got, spoofedFrom)
			}
		}
	}
}

// TestDADPassesSpoofCheck: IPv6 duplicate address detection sends a
// neighbour solicitation from :: (no address has a route back), which
// the reverse-path check leaves alone. The proof is the node's answer:
// the node holds fe80::2 on the pod's cali device, the pod puts the same
// address on its eth0 with DAD, the node receives the solicitation and
// answers that it holds the address, and the pod marks it dadfailed.
// Without the :: exception the solicitation is dropped, nobody answers
// and the address becomes valid. (Not the pod's gateway fe80::1: the
// pod's kernel fails DAD for an address its neighbour cache already
// knows as another node's without sending anything.) A second address
// nobody holds becomes valid: DAD on the pod works at all. On this
// machine's kernel (6.18) the fib lookup itself lets a solicitation
// from :: through on the input hook (the test passes without the
// exception too, and the spoofed-src counter stays still either way);
// the exception keeps DAD working whatever a kernel's fib does with ::.
func TestDADPassesSpoofCheck(t *testing.T) {
	node := polab.NewNode(t)
	p := node.AddPod(t, "cali-dad", "10.74.0.1", "fd00:74::1")
	d := newDP(t, node)
	allowAll(d, p.Iface)
	applyResyncNoop(t, d, "allow all")

	p.Do(t, func() error {
		for _, s := range []string{"accept_dad", "dad_transmits"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/eth0/"+s, []byte("1"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	eth, err := p.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	node.AddAddr(t, p.Iface, "fe80::2/64")
	spoofed := func() uint64 {
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs["spoofed-src/to-host"].Packets
	}
	before := spoofed()
	dup, free := netip.MustParseAddr("fe80::2"), netip.MustParseAddr("fd00:74::99")
	for _, a := range []netip.Addr{dup, free} {
		if err := p.Handle.AddrAdd(eth, &netlink.Addr{IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(64, 128)}}); err != nil {
			t.Fatal(err)
		}
	}
	flags := func(want netip.Addr) (int, bool) {
		addrs, err := p.Handle.AddrList(eth, netlink.FAMILY_V6)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if a.IP.Equal(want.AsSlice()) {
				return a.Flags, true
			}
		}
		return 0, false
	}
	nstest.Eventually(t, 10*time.Second, func() string {
		f, ok := flags(free)
		if !ok || f&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
			return fmt.Sprintf("%s on the pod's eth0 (held by nobody): present %v, flags %#x, not yet valid", free, ok, f)
		}
		return ""
	})
	nstest.Eventually(t, 10*time.Second, func() string {
		f, ok := flags(dup)
		if !ok || f&unix.IFA_F_DADFAILED == 0 {
			return fmt.Sprintf("%s on the pod's eth0 (the node's on %s): present %v, flags %#x, not dadfailed: the node never answered its DAD solicitation from ::", dup, p.Iface, ok, f)
		}
		return ""
	})
	if n := spoofed(); n != before {
		t.Errorf("spoofed-src/to-host counted %d packets during DAD", n-before)
	}
}

func hostAddr(v6 bool) netip.Addr {
	if v6 {
		return netip.MustParseAddr(polab.HostIPv6)
	}
	return netip.MustParseAddr(polab.HostIPv4)
}

// dialTCP connects from src (port 0: any) in the namespace to dst
// within timeout: nil when the connection did not establish (the
// setup failing is fatal).
func dialTCP(t *testing.T, n *nstest.NS, src netip.Addr, port uint16, dst netip.AddrPort, timeout time.Duration) net.Conn {
	t.Helper()
	var conn net.Conn
	n.Do(t, func() error {
		d := net.Dialer{
			LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, port)),
			Control: func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) })
				return errors.Join(err, serr)
			},
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", dst.String())
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
				return nil
			}
			return fmt.Errorf("tcp from %s to %s: %w", netip.AddrPortFrom(src, port), dst, err)
		}
		conn = c
		return nil
	})
	return conn
}

func echoTCP(t *testing.T, c net.Conn, what string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("%s: echo %q, %v", what, buf, err)
	}
}

// tcpSink accepts TCP connections on a port (both families), echoes
// what they send and counts them by remote address.
type tcpSink struct {
	mu   sync.Mutex
	seen map[netip.AddrPort]int
}

func newTCPSink(t *testing.T, n *nstest.NS, port int) *tcpSink {
	t.Helper()
	s := &tcpSink{seen: map[netip.AddrPort]int{}}
	var l net.Listener
	n.Do(t, func() error {
		var err error
		l, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			from := c.RemoteAddr().(*net.TCPAddr).AddrPort()
			s.mu.Lock()
			s.seen[netip.AddrPortFrom(from.Addr().Unmap(), from.Port())]++
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return s
}

func (s *tcpSink) from(a netip.AddrPort) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[a]
}

// tcpCapture counts the TCP SYN/ACKs an interface carries, by their
// source and destination, read from a packet socket in its namespace
// (after the node's nftables: what a pod's eth0 carries came through).
type tcpCapture struct {
	mu      sync.Mutex
	synAcks map[[2]netip.AddrPort]int
}

func captureTCP(t *testing.T, n *nstest.NS, ifname string) *tcpCapture {
	t.Helper()
	c := &tcpCapture{synAcks: map[[2]netip.AddrPort]int{}}
	var fd int
	n.Do(t, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto); err != nil {
			return fmt.Errorf("packet socket: %w", err)
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("binding the packet socket to %s: %w", ifname, err)
		}
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	})
	done := make(chan struct{})
	stopped := make(chan struct{})
	t.Cleanup(func() { close(done); <-stopped; unix.Close(fd) })
	go func() {
		defer close(stopped)
		buf := make([]byte, 2048)
		for {
			select {
			case <-done:
				return
			default:
			}
			k, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			if src, dst, ok := synAck(buf[:k]); ok {
				c.mu.Lock()
				c.synAcks[[2]netip.AddrPort{src, dst}]++
				c.mu.Unlock()
			}
		}
	}()
	return c
}

func (c *tcpCapture) count(src, dst netip.AddrPort) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synAcks[[2]netip.AddrPort{src, dst}]
}

// synAck reads an IPv4 or IPv6 packet carrying TCP with SYN and ACK set.
func synAck(p []byte) (src, dst netip.AddrPort, ok bool) {
	if len(p) < 1 {
		return
	}
	var s, d netip.Addr
	var tcp []byte
	switch p[0] >> 4 {
	case 4:
		ihl := int(p[0]&0x0f) * 4
		if len(p) < ihl+20 || p[9] != unix.IPPROTO_TCP {
			return
		}
		s, d, tcp = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20])), p[ihl:]
	case 6:
		if len(p) < 60 || p[6] != unix.IPPROTO_TCP {
			return
		}
		s, d, tcp = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40])), p[40:]
	default:
		return
	}
	const syn, ack = 0x02, 0x10
	if tcp[13]&(syn|ack) != syn|ack {
		return
	}
	return netip.AddrPortFrom(s, binary.BigEndian.Uint16(tcp[0:2])), netip.AddrPortFrom(d, binary.BigEndian.Uint16(tcp[2:4])), true
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestUnspecifiedSourceOnlyForDAD: IPv6's :: is a source only for DAD's
// neighbour solicitations and MLD reports. A pod sending anything else
// from :: (a UDP datagram written as a raw frame on its eth0) to the
// node or to another pod is dropped as spoofed and counted, whatever
// its egress policy allows (allow-all here). Before the exception was
// narrowed to those ICMPv6 types, the node received the datagram from
// :: (its egress policy allowed it). TestDADPassesSpoofCheck covers
// the solicitations.
func TestUnspecifiedSourceOnlyForDAD(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-una", "10.75.0.1", "fd00:75::1")
	b := node.AddPod(t, "cali-unb", "10.75.0.2", "fd00:75::2")
	const port = 7575
	sinkB := polab.NewUDPSink(t, b.NS, port)
	sinkHost := polab.NewUDPSink(t, node.NS, port)
	d := newDP(t, node)
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(a.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	d.SetEndpoint(b.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	applyResyncNoop(t, d, "allow all")

	// a's own datagrams arrive (and the frames below reach the node: the
	// same path, from the same MAC to the same device).
	for _, dst := range []struct {
		addr netip.Addr
		sink *polab.UDPSink
	}{{b.IPv6, sinkB}, {hostAddr(true), sinkHost}} {
		own := "own to " + dst.addr.String()
		nstest.Eventually(t, 10*time.Second, func() string {
			if src, ok := dst.sink.Has(own); ok {
				if src != a.IPv6.String() {
					return fmt.Sprintf("%s: arrived from %s", own, src)
				}
				return ""
			}
			polab.SendUDP(t, a.NS, a.IPv6, 41750, netip.AddrPortFrom(dst.addr, port), own)
			return own + ": never arrived"
		})
	}

	hostSide, err := node.Handle.LinkByName(a.Iface)
	if err != nil {
		t.Fatal(err)
	}
	eth, err := a.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	counter := func(id string) uint64 {
		t.Helper()
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs[id].Packets
	}
	before := counter("spoofed-src/to-host")
	payload := "from the unspecified address"
	nstest.Eventually(t, 5*time.Second, func() string {
		if n := counter("spoofed-src/to-host"); n > before {
			return ""
		}
		a.Do(t, func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("packet socket: %w", err)
			}
			defer unix.Close(fd)
			for _, dst := range []netip.Addr{b.IPv6, hostAddr(true)} {
				f := udp6Frame(hostSide.Attrs().HardwareAddr, eth.Attrs().HardwareAddr, netip.IPv6Unspecified(), dst, 41751, port, []byte(payload))
				if err := unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: eth.Attrs().Index, Halen: 6}); err != nil {
					return fmt.Errorf("sending a frame on eth0: %w", err)
				}
			}
			return nil
		})
		return "spoofed-src/to-host did not count a's datagram from ::"
	})
	// A datagram of a's own, sent after, arrives: the node is reading.
	after := "after, from a's own address"
	nstest.Eventually(t, 10*time.Second, func() string {
		if _, ok := sinkHost.Has(after); ok {
			return ""
		}
		polab.SendUDP(t, a.NS, a.IPv6, 41752, netip.AddrPortFrom(hostAddr(true), port), after)
		return after + ": never arrived"
	})
	for name, s := range map[string]*polab.UDPSink{"the node": sinkHost, "pod b": sinkB} {
		if src, ok := s.Has(payload); ok {
			t.Errorf("%s received a's datagram from %s", name, src)
		}
	}
}

// udp6Frame builds an Ethernet frame carrying an IPv6 UDP datagram
// with any source (a socket would pick its own).
func udp6Frame(dstMAC, srcMAC net.HardwareAddr, src, dst netip.Addr, sport, dport uint16, payload []byte) []byte {
	ulen := 8 + len(payload)
	f := make([]byte, 14+40+ulen)
	copy(f[0:6], dstMAC)
	copy(f[6:12], srcMAC)
	binary.BigEndian.PutUint16(f[12:14], unix.ETH_P_IPV6)
	ip := f[14:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:6], uint16(ulen))
	ip[6], ip[7] = unix.IPPROTO_UDP, 64
	s16, d16 := src.As16(), dst.As16()
	copy(ip[8:24], s16[:])
	copy(ip[24:40], d16[:])
	u := ip[40:]
	binary.BigEndian.PutUint16(u[0:2], sport)
	binary.BigEndian.PutUint16(u[2:4], dport)
	binary.BigEndian.PutUint16(u[4:6], uint16(ulen))
	copy(u[8:], payload)
	// The checksum over the pseudo-header (addresses, length, next
	// header) and the datagram; 0 is sent as 0xffff in IPv6.
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(ip[8:40])
	sum += uint32(ulen) + unix.IPPROTO_UDP
	add(u)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	cs := ^uint16(sum)
	if cs == 0 {
		cs = 0xffff
	}
	binary.BigEndian.PutUint16(u[6:8], cs)
	return f
}
