package flowlog_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"golang.org/x/sys/unix"
)

// TestParseFlowAgreesWithKernel sends hand-built IPv6 packets with
// extension header chains out of a fresh namespace's loopback; an
// nftables output chain logs each to nflog with a prefix naming what
// the kernel's `meta l4proto` and `th dport` (or icmpv6 type) made of
// it, and ParseFlow must read the same from the logged copy: the
// chains it walks are the kernel's, and where it stops (AH, Mobility,
// No Next Header, a later fragment's missing ports) the kernel does.
func TestParseFlowAgreesWithKernel(t *testing.T) {
	n := nstest.New(t)
	const group = 39
	polab.Nft(t, n, fmt.Sprintf(`table ip6 ext6 {
	chain out {
		type filter hook output priority 0; policy accept;
		meta l4proto tcp th dport 443 log prefix "6/443" group %[1]d accept
		meta l4proto udp th dport 53 log prefix "17/53" group %[1]d accept
		meta l4proto ipv6-icmp icmpv6 type echo-request log prefix "58/128" group %[1]d accept
		meta l4proto 135 log prefix "135/0" group %[1]d accept
		meta l4proto 59 log prefix "59/0" group %[1]d accept
		meta l4proto 51 log prefix "51/0" group %[1]d accept
		meta l4proto tcp log prefix "6/0" group %[1]d accept
	}
}`, group))
	r, err := flowlog.Open(int(n.Fd()), group)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan flowlog.Packet, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; r.Close() })
	go func() {
		defer close(done)
		_ = r.Run(ctx, func(p flowlog.Packet) { got <- p }, nil)
	}()

	tcp := make([]byte, 20)
	binary.BigEndian.PutUint16(tcp, 12345)
	binary.BigEndian.PutUint16(tcp[2:], 443)
	tcp[12], tcp[13] = 5<<4, 0x02
	udp := []byte{0x14, 0xe9, 0, 53, 0, 8, 0, 0}
	echo := []byte{128, 0, 0, 0, 0x12, 0x34, 0, 1}
	opts := func(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }
	ah := func(next uint8) []byte {
		h := make([]byte, 24)
		h[0], h[1], h[7] = next, 4, 1
		return h
	}
	frag := func(next uint8, off uint16) []byte {
		h := []byte{next, 0, 0, 0, 0, 0, 0, 39}
		binary.BigEndian.PutUint16(h[2:], off<<3)
		return h
	}
	cases := []struct {
		want  string
		first uint8
		rest  [][]byte
	}{
		{"6/443", 60, [][]byte{opts(6), tcp}},
		{"6/443", 0, [][]byte{opts(43), {60, 0, 0, 0, 0, 0, 0, 0}, opts(6), tcp}},
		{"51/0", 0, [][]byte{opts(43), {60, 0, 0, 0, 0, 0, 0, 0}, opts(51), ah(6), tcp}},
		{"51/0", 51, [][]byte{ah(6), tcp}},
		{"17/53", 44, [][]byte{frag(60, 0), opts(17), udp}},
		{"58/128", 0, [][]byte{opts(58), echo}},
		{"135/0", 135, [][]byte{{59, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}}},
		{"59/0", 60, [][]byte{opts(59)}},
		{"6/0", 44, [][]byte{frag(6, 100), tcp}},
	}
	fd := rawSocket(t, n)
	for _, c := range cases {
		pkt := make([]byte, 40)
		pkt[0], pkt[6], pkt[7] = 0x60, c.first, 64
		pkt[23], pkt[39] = 1, 1 // ::1 -> ::1
		for _, r := range c.rest {
			pkt = append(pkt, r...)
		}
		binary.BigEndian.PutUint16(pkt[4:], uint16(len(pkt)-40))
		if err := unix.Sendto(fd, pkt, 0, &unix.SockaddrInet6{Addr: netip.IPv6Loopback().As16()}); err != nil {
			t.Fatalf("sending %s: %v", c.want, err)
		}
		select {
		case p := <-got:
			f, ok := flowlog.ParseFlow(p.Payload)
			port := int(f.DstPort)
			if f.ICMPType >= 0 {
				port = f.ICMPType
			}
			if p.Prefix != c.want || !ok || fmt.Sprintf("%d/%d", f.Proto, port) != c.want {
				t.Errorf("kernel %q, ParseFlow %d/%d (%+v) of % x", p.Prefix, f.Proto, port, f, pkt)
			}
		case <-time.After(3 * time.Second):
			t.Fatalf("no nflog packet for %s within 3 s", c.want)
		}
	}
}

// rawSocket is an IPv6 raw socket in n that sends whole packets
// (IPPROTO_RAW: the header is the caller's).
func rawSocket(t *testing.T, n *nstest.NS) int {
	t.Helper()
	var fd int
	n.Do(t, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW)
		return err
	})
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}
