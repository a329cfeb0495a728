package felix

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestStateKeepsWhatRoutesNeed: of another node felix keeps its
// addresses and VXLAN tunnel fields, not its labels or annotations; its
// own Node it keeps whole (its labels select pools).
func TestStateKeepsWhatRoutesNeed(t *testing.T) {
	s := newState()
	mk := func(name string) *api.Node {
		n := testNode(name, "10.0.0.2/24", "10.65.0.1", map[string]string{"zone": "a"})
		n.Metadata.Annotations = map[string]string{"note": "x"}
		n.Spec.BGP.IPv6Address = "fd00::2/64"
		n.Spec.IPv4VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddr = "10.66.0.1", "66:00:00:00:00:01"
		n.Spec.IPv6VXLANTunnelAddr, n.Spec.VXLANTunnelMACAddrV6 = "fd66::1", "66:00:00:00:00:02"
		return n
	}
	s.setResource("a", mk("a"))
	s.setResource("a", mk("b"))
	if got := s.nodes["a"]; got.Metadata.Labels["zone"] != "a" || got.Spec.BGP.IPv4IPIPTunnelAddr != "10.65.0.1" {
		t.Errorf("this node: %+v", got)
	}
	b := s.nodes["b"]
	if b.Metadata.Labels != nil || b.Metadata.Annotations != nil || b.Spec.BGP.IPv4IPIPTunnelAddr != "" {
		t.Errorf("another node keeps more than routes need: %+v %+v", b.Metadata, *b.Spec.BGP)
	}
	if p, ok := s.nodeAddr("b"); !ok || p.String() != "10.0.0.2/24" {
		t.Errorf("another node's address: %v %v", p, ok)
	}
	if p, ok := s.nodeAddr6("b"); !ok || p.String() != "fd00::2/64" {
		t.Errorf("another node's IPv6 address: %v %v", p, ok)
	}
	if a, m := nodeVTEP(b, vxlanV4); a != "10.66.0.1" || m != "66:00:00:00:00:01" {
		t.Errorf("another node's VTEP: %s %s", a, m)
	}
	if a, m := nodeVTEP(b, vxlanV6); a != "fd66::1" || m != "66:00:00:00:00:02" {
		t.Errorf("another node's IPv6 VTEP: %s %s", a, m)
	}
}
