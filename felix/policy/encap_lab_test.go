package policy_test

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// TestWorkloadEncapExplainedAndCounted: pod a sends UDP to pod d's
// port 8472 after the Manager was told it is a VXLAN port: d receives
// nothing, and Explain for that flow names the drop whose kernel counter
// counted the datagram (wl-encap/egress), while UDP to another port of
// d reaches it and Explain allows it. IPv4 and IPv6.
func TestWorkloadEncapExplainedAndCounted(t *testing.T) {
	l := newLab(t)
	const vx, other, srcPort = 8472, 8473, 41848
	a, d := l.pods["a"], l.pods["d"]
	sinkVX := polab.NewUDPSink(t, d.NS, vx)
	sinkOther := polab.NewUDPSink(t, d.NS, other)
	if !l.m.SetWorkloadEncapPorts([]uint16{4789, vx}) {
		t.Fatal("SetWorkloadEncapPorts reported no change")
	}
	l.apply()
	// a resolves its IPv6 gateway first.
	l.expect("before", both(pass("a", "host", "tcp", 7070))...)
	for _, v6 := range []bool{false, true} {
		flow := func(port uint16) policy.Flow {
			return policy.Flow{Src: a.Addr(v6), Dst: d.Addr(v6), Proto: 17, SrcPort: srcPort, DstPort: port, ICMPType: -1, ICMPCode: -1}
		}
		x := l.m.Explain(flow(vx))
		if x.Allowed() || x.Egress.Rule.Kind != policy.KindWorkloadEncap || x.Egress.Rule.ID != "wl-encap/egress" {
			t.Fatalf("explain UDP to %d v6=%v: %+v", vx, v6, x)
		}
		before := l.counter(x.Egress.Rule.ID)
		payload := fmt.Sprintf("vxlan? v6=%v", v6)
		polab.SendUDP(t, a.NS, a.Addr(v6), srcPort, netip.AddrPortFrom(d.Addr(v6), vx), payload)
		nstest.Eventually(t, 5*time.Second, func() string {
			if n := l.counter(x.Egress.Rule.ID); n <= before {
				return fmt.Sprintf("v6=%v: %s still %d", v6, x.Egress.Rule.ID, n)
			}
			return ""
		})
		ok := fmt.Sprintf("other port v6=%v", v6)
		if y := l.m.Explain(flow(other)); !y.Allowed() {
			t.Fatalf("explain UDP to %d v6=%v: %+v", other, v6, y)
		}
		nstest.Eventually(t, 10*time.Second, func() string {
			if _, got := sinkOther.Has(ok); got {
				return ""
			}
			polab.SendUDP(t, a.NS, a.Addr(v6), srcPort+1, netip.AddrPortFrom(d.Addr(v6), other), ok)
			return ok + ": never reached d"
		})
		if _, got := sinkVX.Has(payload); got {
			t.Errorf("v6=%v: d received a's datagram to its VXLAN port", v6)
		}
	}
}
