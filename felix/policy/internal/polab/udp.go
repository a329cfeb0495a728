package polab

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/routed-net/routed/felix/internal/nstest"
)

// UDPSink collects the datagrams a namespace receives on one port, both
// families, with their sources: one-way traffic (a spoofed source gets
// no answer back) is seen where it arrives.
type UDPSink struct {
	mu  sync.Mutex
	got []string // "source payload"
}

// NewUDPSink listens on port in the namespace until the test ends.
func NewUDPSink(t testing.TB, n *nstest.NS, port int) *UDPSink {
	t.Helper()
	s := &UDPSink{}
	var wg sync.WaitGroup
	var conns []*net.UDPConn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	})
	for _, network := range []string{"udp4", "udp6"} {
		var c *net.UDPConn
		n.Do(t, func() error {
			var err error
			c, err = net.ListenUDP(network, &net.UDPAddr{Port: port})
			return err
		})
		conns = append(conns, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1500)
			for {
				k, from, err := c.ReadFromUDP(buf)
				if err != nil {
					return
				}
				s.mu.Lock()
				s.got = append(s.got, from.AddrPort().Addr().Unmap().String()+" "+string(buf[:k]))
				s.mu.Unlock()
			}
		}()
	}
	return s
}

// Has reports whether a datagram with that payload arrived, and its
// source address.
func (s *UDPSink) Has(payload string) (src string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.got {
		if a, p, _ := strings.Cut(g, " "); p == payload {
			return a, true
		}
	}
	return "", false
}

// SendUDP sends one datagram from src:srcPort (src an address the
// namespace holds) to dst.
func SendUDP(t testing.TB, n *nstest.NS, src netip.Addr, srcPort int, dst netip.AddrPort, payload string) {
	t.Helper()
	n.Do(t, func() error {
		c, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, uint16(srcPort))), net.UDPAddrFromAddrPort(dst))
		if err != nil {
			return fmt.Errorf("udp from %s:%d to %s: %w", src, srcPort, dst, err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(payload)); err != nil {
			return fmt.Errorf("udp from %s:%d to %s: %w", src, srcPort, dst, err)
		}
		return nil
	})
}
