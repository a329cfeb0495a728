package nftdp_test

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestSpoofedSourceDroppedBeforeConntrack: pod a sends a datagram from
// pod c's address on the 5-tuple of c's own flow to pod b. The
// reverse-path check drops it on the prerouting hook, before connection
// tracking: c's conntrack entry does not count it (with the check on the
// forward hook, as before, the entry counted it and had its timeout
// refreshed; a TCP RST in the window would have closed c's connection).
// IPv4 and IPv6, real traffic, the kernel's conntrack counters.
func TestSpoofedSourceDroppedBeforeConntrack(t *testing.T) {
	node := polab.NewNode(t)
	node.Do(t, func() error { return os.WriteFile("/proc/sys/net/netfilter/nf_conntrack_acct", []byte("1"), 0) })
	a := node.AddPod(t, "cali-cta", "10.74.0.1", "fd00:74::1")
	b := node.AddPod(t, "cali-ctb", "10.74.0.2", "fd00:74::2")
	c := node.AddPod(t, "cali-ctc", "10.74.0.3", "fd00:74::3")
	const port, srcPort = 7474, 41747
	sinkB := polab.NewUDPSink(t, b.NS, port)

	d := newDP(t, node)
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	for _, p := range []*polab.Pod{a, b, c} {
		d.SetEndpoint(p.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	}
	applyResyncNoop(t, d, "policies")
	// a resolves its gateway (IPv6: neighbour discovery) from its own
	// address first: once it holds c's too, its solicitations may come
	// from that and be dropped as well.
	for _, v6 := range []bool{false, true} {
		own := fmt.Sprintf("own v6=%v", v6)
		nstest.Eventually(t, 10*time.Second, func() string {
			if _, ok := sinkB.Has(own); ok {
				return ""
			}
			polab.SendUDP(t, a.NS, a.Addr(v6), srcPort+1, netip.AddrPortFrom(b.Addr(v6), port), own)
			return own + ": a's datagram from its own address never reached b"
		})
	}
	a.AddAddr(t, "eth0", c.IPv4.String()+"/32")
	a.AddAddr(t, "eth0", c.IPv6.String()+"/128")

	// packets is what c's flow's conntrack entry counted from c.
	packets := func(v6 bool) (uint64, bool) {
		t.Helper()
		fam := netlink.InetFamily(unix.AF_INET)
		if v6 {
			fam = unix.AF_INET6
		}
		// The package's handle opens its netfilter socket in the
		// calling thread's namespace (node.Handle has only a route one).
		var flows []*netlink.ConntrackFlow
		node.Do(t, func() error {
			var err error
			flows, err = netlink.ConntrackTableList(netlink.ConntrackTable, fam)
			return err
		})
		for _, f := range flows {
			src, _ := netip.AddrFromSlice(f.Forward.SrcIP)
			dst, _ := netip.AddrFromSlice(f.Forward.DstIP)
			if src.Unmap() == c.Addr(v6) && dst.Unmap() == b.Addr(v6) && f.Forward.SrcPort == srcPort && f.Forward.DstPort == port {
				return f.Forward.Packets, true
			}
		}
		return 0, false
	}
	for _, v6 := range []bool{false, true} {
		fam := map[bool]string{false: "v4", true: "v6"}[v6]
		to := netip.AddrPortFrom(b.Addr(v6), port)
		real := "real " + fam
		nstest.Eventually(t, 10*time.Second, func() string {
			if _, ok := sinkB.Has(real); ok {
				return ""
			}
			polab.SendUDP(t, c.NS, c.Addr(v6), srcPort, to, real)
			return real + ": c's datagram never reached b"
		})
		before, ok := packets(v6)
		if !ok || before == 0 {
			t.Fatalf("%s: no conntrack entry counting c's flow (%d, %v)", fam, before, ok)
		}
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		dropped := cs["spoofed-src/egress"].Packets
		spoofed := "spoofed " + fam
		polab.SendUDP(t, a.NS, c.Addr(v6), srcPort, to, spoofed)
		nstest.Eventually(t, 5*time.Second, func() string {
			cs, err := d.Counters(nil)
			if err != nil {
				return err.Error()
			}
			if n := cs["spoofed-src/egress"].Packets; n <= dropped {
				return fmt.Sprintf("%s: spoofed-src/egress still %d", spoofed, n)
			}
			return ""
		})
		if after, _ := packets(v6); after != before {
			t.Errorf("%s: c's conntrack entry counted %d packets before a's spoofed one and %d after: conntrack saw it", fam, before, after)
		}
		if _, ok := sinkB.Has(spoofed); ok {
			t.Errorf("%s: b received a's datagram from c's address", fam)
		}
	}
}
