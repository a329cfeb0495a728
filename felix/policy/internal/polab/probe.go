package polab

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// ProbeTimeout is how long a probe waits for an answer. The lab's
// namespaces answer in microseconds, so a probe that times out was
// dropped.
var ProbeTimeout = 400 * time.Millisecond

// AnsweredTimeout is how long Expect waits for an answer it expects:
// an answer ends the wait at once, so a longer wait costs nothing when
// the test passes, and on a loaded machine a pod's first IPv6 exchange
// (neighbour discovery both ways, then the echo) took longer than
// ProbeTimeout and read as dropped.
var AnsweredTimeout = 3 * time.Second

// Serve starts TCP and UDP echo servers on port in the namespace, on
// every address of both families, until the test ends.
func Serve(t testing.TB, n *nstest.NS, port int) {
	t.Helper()
	var l net.Listener
	var pc net.PacketConn
	n.Do(t, func() error {
		var err error
		if l, err = net.Listen("tcp", ":"+strconv.Itoa(port)); err != nil {
			return err
		}
		pc, err = net.ListenPacket("udp", ":"+strconv.Itoa(port))
		return err
	})
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); pc.Close(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				buf := make([]byte, 64)
				k, err := c.Read(buf)
				if err == nil {
					_, _ = c.Write(buf[:k])
				}
			}()
		}
	}()
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:k], from)
		}
	}()
}

// Probe is one attempt: the protocol ("tcp", "udp", "icmp"), the
// destination and, for tcp and udp, the port and an optional source port.
type Probe struct {
	Proto   string
	Dst     netip.Addr
	Port    int
	SrcPort int
	// Timeout is how long to wait for the answer (0: ProbeTimeout).
	Timeout time.Duration
}

func (p Probe) timeout() time.Duration {
	if p.Timeout > 0 {
		return p.Timeout
	}
	return ProbeTimeout
}

func (p Probe) String() string {
	if p.Proto == "icmp" {
		return fmt.Sprintf("icmp %s", p.Dst)
	}
	s := fmt.Sprintf("%s %s", p.Proto, netip.AddrPortFrom(p.Dst, uint16(p.Port)))
	if p.SrcPort != 0 {
		s += fmt.Sprintf(" from port %d", p.SrcPort)
	}
	return s
}

// Send runs the probe from the namespace and reports whether an answer
// came back within ProbeTimeout (err is for setup failures only).
func (p Probe) Send(n *nstest.NS) (bool, error) {
	var ok bool
	err := n.NetNS.Do(func(_ ns.NetNS) error {
		var err error
		switch p.Proto {
		case "tcp":
			ok, err = p.tcp()
		case "udp":
			ok, err = p.udp()
		case "icmp":
			ok, err = p.icmp()
		default:
			err = fmt.Errorf("polab: unknown probe protocol %q", p.Proto)
		}
		return err
	})
	return ok, err
}

func (p Probe) local() net.Addr {
	if p.SrcPort == 0 {
		return nil
	}
	if p.Proto == "udp" {
		return &net.UDPAddr{Port: p.SrcPort}
	}
	return &net.TCPAddr{Port: p.SrcPort}
}

// fixedPort lets a probe from a fixed source port bind it although an
// earlier probe's connection on it lingers in TIME_WAIT, and keeps an
// IPv6 probe's port apart from an IPv4 probe's (a dual-stack socket on
// [::]:port conflicts with 0.0.0.0:port in TIME_WAIT: the bind failed,
// and the probe read as dropped).
func (p Probe) fixedPort(network, _ string, c syscall.RawConn) error {
	if p.SrcPort == 0 {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if serr == nil && p.Dst.Is6() {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
		}
	})
	return errors.Join(err, serr)
}

func (p Probe) tcp() (bool, error) {
	d := net.Dialer{Timeout: p.timeout(), LocalAddr: p.local(), Control: p.fixedPort}
	c, err := d.Dial("tcp", netip.AddrPortFrom(p.Dst, uint16(p.Port)).String())
	if err != nil {
		if errors.Is(err, unix.EADDRNOTAVAIL) || errors.Is(err, unix.EADDRINUSE) {
			// The probe never left: the 4-tuple is still held here.
			return false, fmt.Errorf("polab: probe %v not sent: %w", p, err)
		}
		return false, nil // timed out, refused or reset: no echo either
	}
	defer c.Close()
	ok, err := echo(c, p.timeout())
	if ok && p.SrcPort != 0 {
		// Let the server close first, so its side, not ours, holds
		// the 4-tuple in TIME_WAIT: a probe from the same fixed port
		// may follow at once, and the kernel refuses to connect a
		// 4-tuple whose TIME_WAIT is on the connecting side
		// (EADDRNOTAVAIL), whereas a SYN reaching a TIME_WAIT on the
		// server side opens a new connection. Serve closes right
		// after its echo; the order of the two closes was a race,
		// and the client closing first read the next probe as
		// dropped.
		_ = c.SetReadDeadline(time.Now().Add(p.timeout()))
		_, _ = io.Copy(io.Discard, c)
	}
	return ok, err
}

func (p Probe) udp() (bool, error) {
	d := net.Dialer{LocalAddr: p.local(), Control: p.fixedPort}
	c, err := d.Dial("udp", netip.AddrPortFrom(p.Dst, uint16(p.Port)).String())
	if err != nil {
		return false, err
	}
	defer c.Close()
	return echo(c, p.timeout())
}

func echo(c net.Conn, timeout time.Duration) (bool, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("probe")); err != nil {
		return false, nil
	}
	buf := make([]byte, 16)
	k, err := c.Read(buf)
	return err == nil && string(buf[:k]) == "probe", nil
}

// icmp sends one echo request on a raw socket and waits for its reply.
func (p Probe) icmp() (bool, error) {
	network, typ, reply := "ip4:icmp", byte(8), byte(0)
	if p.Dst.Is6() {
		network, typ, reply = "ip6:ipv6-icmp", 128, 129
	}
	c, err := net.ListenPacket(network, "")
	if err != nil {
		return false, err
	}
	defer c.Close()
	id := uint16(time.Now().UnixNano())
	msg := []byte{typ, 0, 0, 0, byte(id >> 8), byte(id), 0, 1, 'p', 'r', 'o', 'b', 'e'}
	if typ == 8 { // the kernel checksums ICMPv6 itself
		binary.BigEndian.PutUint16(msg[2:], Checksum(msg))
	}
	if _, err := c.WriteTo(msg, &net.IPAddr{IP: p.Dst.AsSlice()}); err != nil {
		return false, nil
	}
	deadline := time.Now().Add(p.timeout())
	_ = c.SetReadDeadline(deadline)
	buf := make([]byte, 1500)
	for {
		k, _, err := c.ReadFrom(buf)
		if err != nil {
			return false, nil
		}
		if k >= 8 && buf[0] == reply && binary.BigEndian.Uint16(buf[4:]) == id {
			return true, nil
		}
	}
}

// Checksum is the Internet checksum of b (RFC 1071).
func Checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// Expect sends the probe and fails the test unless the answer is want.
// An expected answer is waited for up to AnsweredTimeout; a drop is
// concluded after ProbeTimeout.
func Expect(t testing.TB, from *nstest.NS, p Probe, want bool, why string) {
	t.Helper()
	if want && p.Timeout == 0 {
		p.Timeout = AnsweredTimeout
	}
	got, err := p.Send(from)
	if err != nil {
		t.Fatalf("%s: probe %v: %v", why, p, err)
	}
	if got != want {
		verdict := map[bool]string{true: "answered", false: "dropped"}
		t.Errorf("%s: %v from %s was %s, want %s", why, p, from.Name, verdict[got], verdict[want])
	}
}
