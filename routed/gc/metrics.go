package gc

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/routed-net/routed/pkg/ipam"
)

// Metrics are what the last completed cluster-wide pass said of itself,
// on the elected node (0 on the others; a failed or skipped pass leaves
// the last values).
type Metrics struct {
	held  prometheus.Gauge
	leaks prometheus.Gauge
}

// NewMetrics returns the pass's metrics, to register with the daemon's
// registry (Collectors) and give to Run (Config.Metrics).
func NewMetrics() *Metrics {
	return &Metrics{
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "routed_ipam_gc_held",
			Help: "1 while the last completed cluster-wide IPAM GC pass freed no pod address because a WorkloadEndpoint record that does not decode names neither a handle nor an address (its pod may hold any of them; `routedctl ipam check` names it), else 0. Only the elected GC node sets it."}),
		leaks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "routed_ipam_gc_leaks",
			Help: "Leaked allocations older than the grace period the last completed cluster-wide IPAM GC pass found (freed, unless routed_ipam_gc_held is 1). Only the elected GC node sets it."}),
	}
}

// Collectors returns the metrics to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.held, m.leaks}
}

// observe records a finished pass's report; nil (not leading any
// more) sets both to 0.
func (m *Metrics) observe(r *ipam.Report) {
	if m == nil {
		return
	}
	held, leaks := 0.0, 0.0
	if r != nil {
		leaks = float64(len(r.Leaks))
		if r.Held != "" {
			held = 1
		}
	}
	m.held.Set(held)
	m.leaks.Set(leaks)
}
