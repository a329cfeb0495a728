package listcache

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	restores     prometheus.Counter
	fallbacks    *prometheus.CounterVec
	saves        prometheus.Counter
	saveFailures prometheus.Counter
	saveSeconds  prometheus.Histogram
	size         prometheus.Gauge
	catchUp      prometheus.Gauge
}

func newMetrics() metrics {
	return metrics{
		restores: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routed_feed_cache_restores_total",
			Help: "Starts of the node feed from its node-local cache of the datastore instead of a list.",
		}),
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routed_feed_cache_fallbacks_total",
			Help: "Starts of the node feed that listed the datastore instead of using its cache, by reason (absent, corrupt, not private, other range, too old, compacted, revision went back, etcd cluster changed, history diverged, cache too far behind, cache unreadable: it read whole when loaded but not when read again to be delivered).",
		}, []string{"reason"}),
		saves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routed_feed_cache_writes_total",
			Help: "Times the node feed's cache of the datastore was written.",
		}),
		saveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routed_feed_cache_write_failures_total",
			Help: "Times writing the node feed's cache of the datastore failed.",
		}),
		saveSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "routed_feed_cache_write_seconds",
			Help:    "How long writing the node feed's cache of the datastore took.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "routed_feed_cache_bytes",
			Help: "Size of the node feed's cache file as last written.",
		}),
		catchUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "routed_feed_cache_catchup_seconds",
			Help: "At the last start from the cache: from reading it to delivering it, brought up to etcd's revision at start.",
		}),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.restores, m.fallbacks, m.saves, m.saveFailures, m.saveSeconds, m.size, m.catchUp}
}
