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
	snapshots *prometheus.CounterVec
}

func newMetrics() metrics {
	return metrics{
		lists: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routed_feed_lists_total",
			Help: "Lists of the datastore by the node feed, by reason (start, compacted, revision went back, etcd cluster changed, history diverged, requested: the gate let go after a hold, cache: from the node-local cache, cache unreadable: the cache did not read whole when delivered).",
		}, []string{"reason"}),
		resumes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "routed_feed_resumes_total",
			Help: "Times the node feed's watch broke and resumed from its revision without a list.",
		}),
		overflows: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routed_feed_consumer_resyncs_total",
			Help: "Times a consumer fell more than MaxPending updates behind and had its backlog merged to the latest change of each object.",
		}, []string{"consumer"}),
		snapshots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "routed_feed_snapshots_total",
			Help: "Snapshots of the current state queued for a consumer (one per list the gate admits).",
		}, []string{"consumer"}),
	}
}

func (m metrics) all() []prometheus.Collector {
	return []prometheus.Collector{m.lists, m.resumes, m.overflows, m.snapshots}
}
