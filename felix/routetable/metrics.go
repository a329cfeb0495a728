package routetable

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the route table's Prometheus collectors. They are not
// registered anywhere; the owner registers Collectors() where it wants.
type Metrics struct {
	// Programmed is the number of wanted routes that are in the kernel
	// exactly as wanted.
	Programmed prometheus.Gauge
	// ResyncSeconds is the time a full re-read of the kernel takes.
	ResyncSeconds prometheus.Histogram
	// ApplyFailures counts Apply calls that left work undone.
	ApplyFailures prometheus.Counter
}

// NewMetrics makes a fresh, unregistered set of collectors.
func NewMetrics() *Metrics {
	return &Metrics{
		Programmed: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "routed", Subsystem: "felix", Name: "routes_programmed",
			Help: "Routes felix wants that are in the kernel as wanted.",
		}),
		ResyncSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "routed", Subsystem: "felix", Name: "route_resync_seconds",
			Help:    "Duration of full route table resyncs (re-reading links and routes from the kernel).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		ApplyFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "routed", Subsystem: "felix", Name: "route_apply_failures_total",
			Help: "Route table applies that failed (a full resync follows each).",
		}),
	}
}

// Collectors lists the collectors for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Programmed, m.ResyncSeconds, m.ApplyFailures}
}
