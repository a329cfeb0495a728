package policy

import (
	"fmt"
	"testing"
)

// TestExplainWorkloadEncap: what a pod sends as IPIP, IPv6 in IPv4 or
// UDP to a VXLAN port is dropped at its egress before any policy (the
// encapsulation drop: wl-encap/egress), whatever the policies allow,
// and its ingress is never reached; with or without Flow.From. UDP to
// another port meets the policies. The ports follow
// SetWorkloadEncapPorts (4789 until then).
func TestExplainWorkloadEncap(t *testing.T) {
	m := stagedModel(t)
	udp := func(port uint16) Flow {
		f := tcpFlow(1, 3, port) // a (prod) to c (dev): both profiles allow everything
		f.Proto = 17
		return f
	}
	encap := func(name string, f Flow, want bool) {
		t.Helper()
		x := m.Explain(f)
		got := x.Egress.Rule.Kind == KindWorkloadEncap
		if got != want {
			t.Errorf("%s: dropped as encapsulation %v, want %v (egress %+v)", name, got, want, x.Egress)
			return
		}
		if !want {
			if !x.Allowed() {
				t.Errorf("%s: should be allowed by the profiles: %+v", name, x)
			}
			return
		}
		if x.Allowed() || x.Egress.Allowed || x.Egress.Rule.ID != "wl-encap/egress" || x.Egress.Endpoint != "ep-a" || !x.Egress.Policed ||
			x.Ingress.Allowed || x.Ingress.Rule.Kind != KindNotReached || x.Ingress.Endpoint != "ep-c" {
			t.Errorf("%s: %+v", name, x)
		}
	}
	encap("UDP to 4789", udp(4789), true)
	encap("UDP to 4790", udp(4790), false)
	fromA := udp(4789)
	fromA.From = "ep-a"
	encap("UDP to 4789 with --from", fromA, true)
	for _, proto := range []uint8{4, 41} {
		f := udp(0)
		f.Proto = proto
		encap(fmt.Sprintf("IP protocol %d", proto), f, true)
	}
	m.SetWorkloadEncapPorts([]uint16{4789, 8472})
	encap("UDP to 8472, the configured port", udp(8472), true)
	encap("UDP to 4789 still", udp(4789), true)
	// From an address no pod holds, nothing is dropped as a pod's.
	other := udp(4789)
	other.Src = other.Src.Next().Next().Next().Next()
	if x := m.Explain(other); x.Egress.Rule.Kind == KindWorkloadEncap {
		t.Errorf("UDP to 4789 from no pod: %+v", x.Egress)
	}
}
