package felix

import (
	"net/netip"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// TestImportGuard plans the routes a rogue mesh node, honest nodes and a
// ToR announce, and checks which reach the plan and why the rest do not.
func TestImportGuard(t *testing.T) {
	cfg := &Config{NodeName: "a"}
	s := newState()
	s.setResource("a", testPool("pods", "10.65.0.0/16", "Never", false, ""))
	s.setResource("a", testNode("a", "10.0.0.1/24", "", nil))
	s.setResource("a", testNode("b", "10.0.0.2/24", "", nil))
	s.setResource("a", testNode("rogue", "10.0.0.66/24", "", nil))
	s.affinities[affKey{"a", pfx("10.65.1.0/26")}] = BlockAffinity{"a", pfx("10.65.1.0/26"), AffinityConfirmed}
	s.affinities[affKey{"b", pfx("10.65.2.0/26")}] = BlockAffinity{"b", pfx("10.65.2.0/26"), AffinityConfirmed}
	// b borrowed 10.65.1.60 from a's block and 10.65.3.7 from a block
	// this node has not heard of yet.
	s.borrowed[pfx("10.65.1.0/26")] = map[netip.Addr]string{addr("10.65.1.60"): "b"}
	s.borrowed[pfx("10.65.3.0/26")] = map[netip.Addr]string{addr("10.65.3.7"): "b"}

	rogue := learnedRoute{nextHop: addr("10.0.0.66"), peer: addr("10.0.0.66")}
	fromB := learnedRoute{nextHop: addr("10.0.0.2"), peer: addr("10.0.0.2")}
	tor := learnedRoute{nextHop: addr("10.0.0.254"), peer: addr("10.0.0.254")}
	// A pod of this node peering through localWorkloadSelector.
	pod := learnedRoute{nextHop: addr("10.65.1.7"), peer: addr("10.65.1.7")}
	cases := []struct {
		dst    string
		from   learnedRoute
		reason string // "" = accepted
	}{
		{"0.0.0.0/0", rogue, FilterClusterOutside},
		{"10.96.0.0/12", rogue, FilterClusterOutside}, // the service range
		{"10.65.2.9/32", rogue, FilterNotInIPAM},      // a pod in b's block
		{"10.65.1.32/27", rogue, FilterOwnBlock},      // beats a's blackhole
		{"10.65.1.0/26", rogue, FilterOwnBlock},
		{"10.65.1.5/32", fromB, FilterOwnBlock}, // not lent to b
		{"10.65.2.0/26", rogue, FilterWrongNextHop},
		{"10.65.3.7/32", rogue, FilterWrongNextHop},
		{"10.65.9.0/26", fromB, FilterNotInIPAM},
		{"10.65.0.0/16", fromB, FilterNotInIPAM},
		{"10.65.2.0/26", fromB, ""},
		{"10.65.1.60/32", fromB, ""}, // lent to b from a's own block
		{"10.65.3.7/32", fromB, ""},
		{"0.0.0.0/0", tor, ""},    // a ToR's default route
		{"10.65.2.0/26", tor, ""}, // a ToR re-announcing b's block
		{"10.65.1.32/27", tor, FilterOwnBlock},
		{"10.65.9.0/26", tor, FilterNotInIPAM},
		{"203.0.113.0/24", pod, ""},                 // outside the pools
		{"0.0.0.0/0", pod, ""},                      // covers the pool: IPAM's routes are longer
		{"10.65.2.0/26", pod, FilterWorkloadInPool}, // b's block: a ToR may, a pod may not
		{"10.65.2.9/32", pod, FilterWorkloadInPool}, // a pod of b's
		{"10.65.1.8/32", pod, FilterWorkloadInPool}, // a neighbour pod
		{"10.65.3.7/32", pod, FilterWorkloadInPool}, // borrowed by b
		{"10.65.0.0/16", pod, FilterWorkloadInPool}, // the pool itself
	}
	for _, c := range cases {
		s.learned = map[netip.Prefix]learnedRoute{pfx(c.dst): c.from}
		p := computePlan(cfg, s)
		rej := p.rejected[pfx(c.dst)]
		_, planned := p.routes[pfx(c.dst)]
		switch {
		case c.reason == "" && (rej != nil || !planned):
			t.Errorf("%s from %s: refused (%v), want it planned", c.dst, c.from.peer, rej)
		case c.reason != "" && (rej == nil || rej.kind != c.reason):
			t.Errorf("%s from %s: rejection %v, want %s", c.dst, c.from.peer, rej, c.reason)
		case c.reason != "" && planned && p.routes[pfx(c.dst)].Gw == c.from.nextHop:
			// (IPAM's own route for the prefix may stay planned.)
			t.Errorf("%s from %s: refused but still planned via it: %v", c.dst, c.from.peer, p.routes[pfx(c.dst)])
		}
	}
}

// TestFilterStatePublishes checks what Filtered and the metric report.
func TestFilterStatePublishes(t *testing.T) {
	fs := newFilterState()
	fs.set(map[netip.Prefix]*rejection{
		pfx("0.0.0.0/0"):     {FilterClusterOutside, "outside every IP pool, from node rogue"},
		pfx("10.65.1.32/27"): {FilterOwnBlock, "inside 10.65.1.0/26"},
	})
	f := &Felix{filters: fs}
	if got := f.Filtered(pfx("0.0.0.0/0")); got != FilterClusterOutside+": outside every IP pool, from node rogue" {
		t.Errorf("Filtered(0/0) = %q", got)
	}
	if got := f.Filtered(pfx("10.65.2.0/26")); got != "" {
		t.Errorf("Filtered(unfiltered) = %q", got)
	}
	if got := gauge(t, fs, FilterOwnBlock); got != 1 {
		t.Errorf("gauge own-block = %v, want 1", got)
	}
	fs.set(nil)
	if got := gauge(t, fs, FilterOwnBlock); got != 0 {
		t.Errorf("gauge own-block after clearing = %v, want 0", got)
	}
}

func gauge(t *testing.T, fs *filterState, reason string) float64 {
	t.Helper()
	var m dto.Metric
	if err := fs.gauge.WithLabelValues(reason).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

// TestOnlyPodDevicesGetPodRoutes: an endpoint naming a host interface
// (eth0, lo) or a bare prefix gets no route; pod devices do.
func TestOnlyPodDevicesGetPodRoutes(t *testing.T) {
	cfg := &Config{NodeName: "a", WorkloadInterfacePrefix: "cali"}
	s := newState()
	s.setResource("a", testPool("p", "10.3.0.0/16", "Never", false, ""))
	s.setResource("a", testNode("a", "10.0.0.1/24", "", nil))
	for _, w := range []struct{ name, iface, ip string }{
		{"good", "cali12345", "10.3.0.5/32"},
		{"host", "eth0", "10.3.0.6/32"},
		{"loop", "lo", "10.3.0.7/32"},
		{"bare", "cali", "10.3.0.8/32"},
		{"long", "cali0123456789ab", "10.3.0.9/32"},
	} {
		s.setResource("a", testWEP(w.name, "a", w.iface, w.ip))
	}
	p := computePlan(cfg, s)
	if r, ok := p.routes[pfx("10.3.0.5/32")]; !ok || r.Iface != "cali12345" {
		t.Errorf("pod device: %v %v", r, ok)
	}
	for _, ip := range []string{"10.3.0.6/32", "10.3.0.7/32", "10.3.0.8/32", "10.3.0.9/32"} {
		if r, ok := p.routes[pfx(ip)]; ok {
			t.Errorf("%s routed to %q", ip, r.Iface)
		}
	}
	if len(p.badIfaces) != 4 {
		t.Errorf("bad interfaces %v, want 4", p.badIfaces)
	}
}
