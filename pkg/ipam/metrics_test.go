package ipam

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("one-block", "10.14.0.0/28", 28)
	c := New(e.ds)
	assign(t, c, "n1", "a")
	assign(t, c, "n1", "b")
	assign(t, c, "n2", "borrowed")

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(New(e.ds), 0))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = value(m)
		}
	}
	want := map[string]float64{
		"routed_ipam_up": 1,
		"routed_ipam_pool_size,cidr=10.14.0.0/28,pool=one-block": 16,
		"routed_ipam_allocations_in_use,pool=one-block":          3,
		"routed_ipam_allocations_borrowed,pool=one-block":        1,
		"routed_ipam_blocks_per_node,node=n1":                    1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}
