package nftdp_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestSpoofedSourceDropped: pod A puts pod C's addresses on its own eth0
// and sends UDP from them, to pod B (whose ingress admits only C's
// addresses) and to the host. Without a reverse-path check B and the
// host received it (the hole this test was written for); now the
// nftables check drops it, counted under spoofed-src/egress and
// spoofed-src/to-host, while C's own datagrams (sent first on the same
// ports, so the spoofed ones match C's conntrack entry) still pass, and
// so do A's from its own addresses (IPv6: after neighbour discovery
// from its link-local or own address).
// IPv4 and IPv6, real traffic between namespaces.
func TestSpoofedSourceDropped(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-spa", "10.71.0.1", "fd00:71::1")
	b := node.AddPod(t, "cali-spb", "10.71.0.2", "fd00:71::2")
	c := node.AddPod(t, "cali-spc", "10.71.0.3", "fd00:71::3")
	const port, srcPort = 7171, 41717
	sinkB := polab.NewUDPSink(t, b.NS, port)
	sinkHost := polab.NewUDPSink(t, node.NS, port)

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

	// A's own addresses are its own: it reaches the host from them (which
	// also resolves its IPv6 gateway from its own address: once A holds
	// C's address too, its neighbour solicitations may come from that,
	// and they are dropped as well).
	for _, v6 := range []bool{false, true} {
		hostAddr := netip.MustParseAddr(polab.HostIPv4)
		if v6 {
			hostAddr = netip.MustParseAddr(polab.HostIPv6)
		}
		payload := fmt.Sprintf("own v6=%v", v6)
		nstest.Eventually(t, 10*time.Second, func() string {
			if src, ok := sinkHost.Has(payload); ok {
				if src != a.Addr(v6).String() {
					return fmt.Sprintf("%s: arrived from %s", payload, src)
				}
				return ""
			}
			polab.SendUDP(t, a.NS, a.Addr(v6), srcPort+1, netip.AddrPortFrom(hostAddr, port), payload)
			return payload + ": A's datagram from its own address never reached the host"
		})
	}

	// A holds C's addresses, as `ip addr add` in its namespace would.
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
	for _, v6 := range []bool{false, true} {
		fam := map[bool]string{false: "v4", true: "v6"}[v6]
		hostAddr := netip.MustParseAddr(polab.HostIPv4)
		if v6 {
			hostAddr = netip.MustParseAddr(polab.HostIPv6)
		}
		for _, dst := range []struct {
			name string
			addr netip.Addr
			sink *polab.UDPSink
			id   string
		}{
			{"pod B", b.Addr(v6), sinkB, "spoofed-src/egress"},
			{"the host", hostAddr, sinkHost, "spoofed-src/to-host"},
		} {
			to := netip.AddrPortFrom(dst.addr, port)
			// C's own datagram passes and leaves a conntrack entry the
			// spoofed one below would match.
			real := "real " + fam + " " + dst.name
			nstest.Eventually(t, 10*time.Second, func() string {
				if src, ok := dst.sink.Has(real); ok {
					if src != c.Addr(v6).String() {
						return fmt.Sprintf("%s: C's datagram arrived from %s", real, src)
					}
					return ""
				}
				polab.SendUDP(t, c.NS, c.Addr(v6), srcPort, to, real)
				return fmt.Sprintf("%s: C's own datagram never arrived at %s", real, dst.name)
			})

			spoofed := "spoofed " + fam + " " + dst.name
			before := counter(dst.id)
			polab.SendUDP(t, a.NS, c.Addr(v6), srcPort, to, spoofed)
			nstest.Eventually(t, 5*time.Second, func() string {
				if src, ok := dst.sink.Has(spoofed); ok {
					return fmt.Sprintf("%s: %s received A's datagram sent from C's address (arrived from %s)", spoofed, dst.name, src)
				}
				if n := counter(dst.id); n <= before {
					return fmt.Sprintf("%s: counter %s still %d", spoofed, dst.id, n)
				}
				return ""
			})
			// C's datagrams still pass after the drop, and the spoofed
			// one, sent before them, has not turned up late.
			after := "after " + fam + " " + dst.name
			nstest.Eventually(t, 10*time.Second, func() string {
				if _, ok := dst.sink.Has(after); ok {
					return ""
				}
				polab.SendUDP(t, c.NS, c.Addr(v6), srcPort, to, after)
				return fmt.Sprintf("%s: C's datagram after the spoofed one never arrived", after)
			})
			if src, ok := dst.sink.Has(spoofed); ok {
				t.Errorf("%s: %s received A's datagram sent from C's address (arrived from %s)", spoofed, dst.name, src)
			}
		}
	}
}
