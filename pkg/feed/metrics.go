package feed

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
)

var log = logrus.WithField("component", "feed")

type metrics struct {
	lists     *prometheus.CounterVec
	resumes   prometheus.Counter
	overflows *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routed_feed_lists_total",
			Help: "Full lists of the datastore by the node feed, by reason (start, compacted, revision went back, etcd cluster changed, history diverged).",
		}, []string{"reason"}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routed_feed_resumes_total",
			Help: "Times the node feed's watch broke and resumed from its revision without a list.",
		}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routed_feed_consumer_resyncs_total",
			Help: "Times a consumer fell more than MaxPending updates behind and got a snapshot instead of its backlog.",
		}, []string{"consumer"}),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.lists, m.resumes, m.overflows}
}
