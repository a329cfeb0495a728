package flowrec

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts flows per verdict and deciding policy.
type Metrics struct {
	flows   *prometheus.CounterVec
	dropped *prometheus.CounterVec
	// markFailures and markUp follow the nflog reader.
	markFailures prometheus.Counter
	markUp       prometheus.Gauge
}

// NewMetrics registers routed_flows_total{verdict,direction,policy} (new
// connections, by the policy, profile or tier end that decided each
// direction policed here; "" when none did) and
// routed_flows_dropped_total{reason}, and the nflog reader's health:
// routed_flows_mark_reader_failures_total and routed_flows_mark_reader_up.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		flows: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routed_flows_total",
			Help: "New connections to or from local pods, by verdict and by the policy that decided each direction."},
			[]string{"verdict", "direction", "policy"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "routed_flows_dropped_total",
			Help: "Connections or marks the flow collector's caps or the kernel turned away, by reason."}, []string{"reason"}),
		markFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "routed_flows_mark_reader_failures_total",
			Help: "Failures of the flow collector's nflog reader (the deciding rules' marks); it is started again with backoff."}),
		markUp: prometheus.NewGauge(prometheus.GaugeOpts{Name: "routed_flows_mark_reader_up",
			Help: "1 while the flow collector's nflog reader runs (at the last batch); flows decided while it is 0 carry noTrace."}),
	}
	m.markUp.Set(1)
	for _, c := range []prometheus.Collector{m.flows, m.dropped, m.markFailures, m.markUp} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Sink is the Config.Sinks function.
func (m *Metrics) Sink(b Batch) {
	for i := range b.Flows {
		f := &b.Flows[i]
		n := float64(f.Started + f.Denied)
		if n == 0 {
			continue
		}
		for _, x := range []struct {
			dir string
			t   *Trace
		}{{"egress", f.Egress}, {"ingress", f.Ingress}} {
			if x.t == nil {
				continue
			}
			d := x.t.Decider()
			name := d.Policy
			if name == "" && d.Profile != "" {
				name = "profile:" + d.Profile
			} else if name == "" && d.Kind != "" {
				name = d.Kind + ":" + d.Tier
			}
			m.flows.WithLabelValues(x.t.Verdict, x.dir, name).Add(n)
		}
	}
	if b.Part == 0 {
		m.markFailures.Add(float64(b.MarkReaderFailures))
		if b.MarkReaderDown {
			m.markUp.Set(0)
		} else {
			m.markUp.Set(1)
		}
	}
	for r, n := range b.Dropped {
		m.dropped.WithLabelValues(r).Add(float64(n))
	}
}
