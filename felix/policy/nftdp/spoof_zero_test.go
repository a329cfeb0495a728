package nftdp_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestZeroSourceOnlyForDHCP: IPv4's 0.0.0.0 is a source only for a DHCP
// client's request (UDP 68 to 67) to the broadcast, and for IGMP. A
// pod's UDP from 0.0.0.0 to the broadcast on another port (a raw frame
// on its eth0) is dropped as spoofed and counted, though its egress
// policy allows everything; before, the node's service on that port
// received it (a review proved it). The DHCP request still reaches the
// node's port 67.
func TestZeroSourceOnlyForDHCP(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-zea", "10.77.0.1", "")
	const port = 7676
	sink := polab.NewUDPSink(t, node.NS, port)
	dhcp := polab.NewUDPSink(t, node.NS, 67)
	d := newDP(t, node)
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(a.Iface, "allow-all", "allow-all", nftdp.BothFamilies)
	applyResyncNoop(t, d, "allow all")

	eth, err := a.Handle.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	bcast := netip.AddrFrom4([4]byte{255, 255, 255, 255})
	send := func(sport, dport uint16, payload string) {
		t.Helper()
		frame := append([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, eth.Attrs().HardwareAddr...)
		frame = append(frame, 0x08, 0x00)
		frame = append(frame, innerUDP(netip.IPv4Unspecified(), bcast, int(sport), int(dport), payload)...)
		a.Do(t, func() error {
			fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("packet socket: %w", err)
			}
			defer unix.Close(fd)
			return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: eth.Attrs().Index, Halen: 6, Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}})
		})
	}
	// The DHCP request arrives, from 0.0.0.0.
	nstest.Eventually(t, 10*time.Second, func() string {
		if src, ok := dhcp.Has("discover"); ok {
			if src != "0.0.0.0" {
				return "the DHCP request arrived from " + src
			}
			return ""
		}
		send(68, 67, "discover")
		return "a's DHCP request from 0.0.0.0 never reached the node's port 67"
	})
	counter := func() uint64 {
		t.Helper()
		cs, err := d.Counters(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cs["spoofed-src/to-host"].Packets
	}
	before := counter()
	send(41767, port, "not dhcp")
	nstest.Eventually(t, 5*time.Second, func() string {
		if _, ok := sink.Has("not dhcp"); ok {
			return "the node received a's UDP from 0.0.0.0 to its port " + fmt.Sprint(port)
		}
		if n := counter(); n <= before {
			return fmt.Sprintf("spoofed-src/to-host still %d", n)
		}
		return ""
	})
	// The node is reading that port: a's own datagram, sent after, arrives.
	nstest.Eventually(t, 10*time.Second, func() string {
		if _, ok := sink.Has("own"); ok {
			return ""
		}
		polab.SendUDP(t, a.NS, a.IPv4, 41768, netip.AddrPortFrom(netip.MustParseAddr(polab.HostIPv4), port), "own")
		return "a's own datagram never arrived"
	})
	if _, ok := sink.Has("not dhcp"); ok {
		t.Error("the node received a's UDP from 0.0.0.0")
	}
}
