package nftdp_test

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// encapLab is a node with pod B (10.74.0.2, fd00:74::2) admitting only
// remote pod R (10.74.9.9, fd00:74:9::9), a VXLAN device over IPv4 and
// one over IPv6 (VNI 4096), and the policy dataplane checking both
// VXLAN ports: the setting of the tunnel source tests, where a frame
// wrapping a datagram from R to B shows whether the node unwrapped it.
type encapLab struct {
	t               *testing.T
	node            *polab.Node
	b               *polab.Pod
	d               *nftdp.Dataplane
	sinkB           *polab.UDPSink
	mac, mac6       net.HardwareAddr
	vxPort, vx6Port int
	remote          map[bool]netip.Addr
}

// encapLabPort and encapLabSrcPort are the inner datagram's ports.
const encapLabPort, encapLabSrcPort = 7474, 41747

// newEncapLab builds the lab with B on podIface and the devices vx and
// vx+"6" on vxPort and vx6Port; the policies are applied.
func newEncapLab(t *testing.T, podIface, vx string, vxPort, vx6Port int) *encapLab {
	l := &encapLab{t: t, node: polab.NewNode(t), vxPort: vxPort, vx6Port: vx6Port,
		remote: map[bool]netip.Addr{false: netip.MustParseAddr("10.74.9.9"), true: netip.MustParseAddr("fd00:74:9::9")}}
	l.b = l.node.AddPod(t, podIface, "10.74.0.2", "fd00:74::2")
	l.mac = addVXLAN(t, l.node, vx, vxPort)
	l.mac6 = addVXLAN6(t, l.node, vx+"6", vx6Port)
	l.sinkB = polab.NewUDPSink(t, l.b.NS, encapLabPort)

	d := newDP(t, l.node)
	d.AddSet("from-r", nftdp.AddrSet)
	for _, a := range l.remote {
		d.AddMember("from-r", nftdp.Member{Prefix: netip.PrefixFrom(a, a.BitLen())})
	}
	if err := d.SetChain("b-in", []nftdp.Rule{
		{Src: nftdp.Side{Sets: []string{"from-r"}}, Action: nftdp.ActAccept},
		{Action: nftdp.ActDrop},
	}); err != nil {
		t.Fatal(err)
	}
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(l.b.Iface, "allow-all", "b-in", nftdp.BothFamilies)
	d.SetWorkloadEncapPorts([]uint16{uint16(vxPort), uint16(vx6Port)})
	applyResyncNoop(t, d, "policies")
	l.d = d
	return l
}

// frame is a VXLAN payload wrapping a datagram from R to B (inner
// family innerV6) for the device of the outer family outerV6, and the
// port to send it to.
func (l *encapLab) frame(outerV6, innerV6 bool, payload string) (port uint16, data string) {
	inner := innerUDP(l.remote[innerV6], l.b.Addr(innerV6), encapLabSrcPort, encapLabPort, payload)
	if outerV6 {
		return uint16(l.vx6Port), string(vxlanFrame(l.mac6, innerV6, inner))
	}
	return uint16(l.vxPort), string(vxlanFrame(l.mac, innerV6, inner))
}

// counter is the encap-src/not-node drop's packet count.
func (l *encapLab) counter() uint64 {
	l.t.Helper()
	cs, err := l.d.Counters(nil)
	if err != nil {
		l.t.Fatal(err)
	}
	return cs[nftdp.EncapSrcDropID].Packets
}

// arrives sends msg (with send, again until it arrives) and waits for
// B to receive it from R's address of the family innerV6.
func (l *encapLab) arrives(msg string, innerV6 bool, send func(payload string)) {
	l.t.Helper()
	nstest.Eventually(l.t, 10*time.Second, func() string {
		if src, ok := l.sinkB.Has(msg); ok {
			if src != l.remote[innerV6].String() {
				return fmt.Sprintf("%s: arrived from %s", msg, src)
			}
			return ""
		}
		send(msg)
		return msg + ": the inner datagram never reached B"
	})
}

// dropped sends msg once and waits for the drop's counter to grow,
// failing if B receives it.
func (l *encapLab) dropped(msg string, send func(payload string)) {
	l.t.Helper()
	before := l.counter()
	send(msg)
	nstest.Eventually(l.t, 5*time.Second, func() string {
		if src, ok := l.sinkB.Has(msg); ok {
			return fmt.Sprintf("%s: B received the inner datagram from %s", msg, src)
		}
		if n := l.counter(); n <= before {
			return fmt.Sprintf("%s: counter %s still %d", msg, nftdp.EncapSrcDropID, n)
		}
		return ""
	})
}
