package felix

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestLearnedRoutePriorityIsItsMetric: a learned route's priority (a
// BGPFilter's setPriority) is its kernel metric, as Calico's BIRD
// programs it; the default priority is felix's usual metric for the
// family (IPv4 0, IPv6 1024), whatever the family.
func TestLearnedRoutePriorityIsItsMetric(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	s.setResource("a", testNode("a", "192.0.2.1/24", "", nil))
	tor := addr("192.0.2.254")
	for _, c := range []struct {
		dst      string
		priority uint32
		metric   uint32
	}{
		{"10.50.0.0/16", 100, 100},
		{"10.51.0.0/16", 2000, 2000},
		{"10.52.0.0/16", api.DefaultRoutePriority, 0},
		{"2001:db8:1::/48", 256, 256},
		{"2001:db8:2::/48", api.DefaultRoutePriority, 0},
	} {
		nh := tor
		if pfx(c.dst).Addr().Is6() {
			nh = addr("fd00::fe")
		}
		s.learned[pfx(c.dst)] = learnedRoute{nextHop: nh, peer: nh, priority: c.priority}
		p := computePlan(cfg, s)
		if got := p.routes[pfx(c.dst)]; got.Metric != c.metric || got.Gw != nh {
			t.Errorf("priority %d: route %v (metric %d), want metric %d", c.priority, got, got.Metric, c.metric)
		}
	}
}
