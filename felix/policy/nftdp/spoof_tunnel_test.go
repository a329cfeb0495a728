package nftdp_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestLocalPodSourceFromTunnelDropped: a peer reached through a device
// the dataplane knows as a tunnel (as wg.routed or vxlan.routed are,
// with rp_filter off on it) sends UDP to pod b from pod a's address (a
// is local to this node): b admits only a, and received it before the
// check (the hole: another node posing as a local pod, e.g. from an
// address this node borrowed in that node's block); now it is dropped,
// counted spoofed-src/tunnel, while the peer's datagrams from its own
// address still reach b through the same device (b's policy allows
// them for this test). IPv4 and IPv6.
func TestLocalPodSourceFromTunnelDropped(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-tua", "10.75.0.1", "fd00:75::1")
	b := node.AddPod(t, "cali-tub", "10.75.0.2", "fd00:75::2")
	peer := node.AddPeer(t, "tunx0", 76)
	node.Do(t, func() error {
		for _, s := range []string{"all", "tunx0"} {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+s+"/rp_filter", []byte("0"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	const port, srcPort = 7575, 41757
	sinkB := polab.NewUDPSink(t, b.NS, port)

	d, err := nftdp.New(nftdp.Config{NetnsFd: node.Fd, TunnelIfaces: []string{"tunx0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	d.AddSet("from-a-or-peer", nftdp.AddrSet)
	for _, p := range append(a.Prefixes(), netip.PrefixFrom(peer.IPv4, 32), netip.PrefixFrom(peer.IPv6, 128)) {
		d.AddMember("from-a-or-peer", nftdp.Member{Prefix: p})
	}
	if err := d.SetChain("b-in", []nftdp.Rule{
		{Src: nftdp.Side{Sets: []string{"from-a-or-peer"}}, Action: nftdp.ActAccept},
		{Action: nftdp.ActDrop},
	}); err != nil {
		t.Fatal(err)
	}
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(a.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	d.SetEndpoint(b.Iface, "allow-all", "b-in", nftdp.BothFamilies)
	applyResyncNoop(t, d, "policies")

	// The peer holds a's addresses too (on lo), and sends from them.
	peer.AddAddr(t, "lo", a.IPv4.String()+"/32")
	peer.AddAddr(t, "lo", a.IPv6.String()+"/128")
	eth, err := peer.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, dst := range []netip.Prefix{netip.PrefixFrom(b.IPv4, 32), netip.PrefixFrom(b.IPv6, 128)} {
		gw := peer.NodeAddr(dst.Addr().Is6())
		if err := peer.Handle.RouteReplace(&netlink.Route{LinkIndex: eth.Attrs().Index, Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), dst.Addr().BitLen())}, Gw: gw.AsSlice()}); err != nil {
			t.Fatal(err)
		}
	}
	counter := func() uint64 {
		t.Helper()
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs["spoofed-src/tunnel"].Packets
	}
	for _, v6 := range []bool{false, true} {
		to := netip.AddrPortFrom(b.Addr(v6), port)
		own := fmt.Sprintf("peer's own v6=%v", v6)
		nstest.Eventually(t, 10*time.Second, func() string {
			if _, ok := sinkB.Has(own); ok {
				return ""
			}
			polab.SendUDP(t, peer.NS, peer.Addr(v6), srcPort, to, own)
			return own + ": never reached b"
		})
		before := counter()
		spoofed := fmt.Sprintf("as a v6=%v", v6)
		polab.SendUDP(t, peer.NS, a.Addr(v6), srcPort, to, spoofed)
		nstest.Eventually(t, 5*time.Second, func() string {
			if src, ok := sinkB.Has(spoofed); ok {
				return fmt.Sprintf("%s: b received the peer's datagram from %s", spoofed, src)
			}
			if n := counter(); n <= before {
				return fmt.Sprintf("%s: spoofed-src/tunnel still %d", spoofed, n)
			}
			return ""
		})
		after := fmt.Sprintf("peer's own after v6=%v", v6)
		nstest.Eventually(t, 10*time.Second, func() string {
			if _, ok := sinkB.Has(after); ok {
				return ""
			}
			polab.SendUDP(t, peer.NS, peer.Addr(v6), srcPort+1, to, after)
			return after + ": never reached b"
		})
		if src, ok := sinkB.Has(spoofed); ok {
			t.Errorf("%s: b received it from %s", spoofed, src)
		}
	}
}
