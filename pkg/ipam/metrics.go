package ipam

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports IPAM usage to Prometheus. It reads the datastore at
// scrape time (bounded by a timeout) rather than keeping counters, so the
// numbers are right whichever process made the allocations. Given the
// node feed's block tallies (Tallies) it accounts from them and reads
// only the pools, at every scrape; without them (or while the feed has
// none) it reads every block, at most once per UsageEvery: such a read
// decodes every block of the cluster (at 150,000 pods about 130 MB
// allocated and 0.6-2.5 s of CPU), and scrapes come every 15-30 s, from
// more than one Prometheus at times. It is not registered anywhere: the
// daemon registers it.
type Collector struct {
	c       *Client
	timeout time.Duration
	every   time.Duration

	mu     sync.Mutex // held through a read: concurrent scrapes share it
	last   *Usage     // the last usage read, nil before the first
	lastAt time.Time
	// usageWhen, when set, says whether this process exports the
	// cluster-wide usage (it reads every block): only one process of the
	// cluster should, or every scrape of every node lists all of IPAM.
	usageWhen func() bool
	tallies   Tallies

	up, age, poolSize, inUse, borrowed, blocks, txns, conflicts *prometheus.Desc
}

// DefaultUsageEvery is how long a usage read serves scrapes.
const DefaultUsageEvery = time.Minute

// UsageEvery sets how long a usage read serves later scrapes (0: read at
// every scrape).
func (m *Collector) UsageEvery(d time.Duration) *Collector { m.every = d; return m }

// UsageWhen makes the collector export the cluster-wide usage only while
// f says so (the daemon: while it is the elected IPAM GC node); its own
// transaction counters are always exported.
func (m *Collector) UsageWhen(f func() bool) *Collector { m.usageWhen = f; return m }

// Tallies makes the collector account from t (the node feed's
// BlockTallies) while it has them, instead of reading every block.
func (m *Collector) Tallies(t Tallies) *Collector { m.tallies = t; return m }

// NewCollector returns a Collector reading through c; each scrape gives
// up after timeout (0 means 5s).
func NewCollector(c *Client, timeout time.Duration) *Collector {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("routed_ipam_"+name, help, labels, nil)
	}
	return &Collector{
		c:         c,
		timeout:   timeout,
		every:     DefaultUsageEvery,
		up:        d("up", "1 if the last scrape could read the IPAM state, else 0."),
		age:       d("usage_age_seconds", "Seconds since the usage figures were current: since the node feed's watch last made progress (figures from its block tallies), or since every block was read (at most once a minute; once a GC period in routed cluster-gc)."),
		poolSize:  d("pool_size", "Addresses in the pool.", "pool", "cidr"),
		inUse:     d("allocations_in_use", "Allocated addresses in the pool.", "pool"),
		borrowed:  d("allocations_borrowed", "Addresses allocated for a node from another node's block.", "pool"),
		blocks:    d("blocks_per_node", "Blocks affine to the node.", "node"),
		txns:      d("etcd_transactions_total", "etcd transactions made by this process's IPAM client."),
		conflicts: d("write_conflicts_total", "Conditional IPAM writes by this process that lost to another writer."),
	}
}

// Describe implements prometheus.Collector.
func (m *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.up, m.age, m.poolSize, m.inUse, m.borrowed, m.blocks, m.txns, m.conflicts} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Collector) Collect(ch chan<- prometheus.Metric) {
	st := m.c.Stats()
	ch <- prometheus.MustNewConstMetric(m.txns, prometheus.CounterValue, float64(st.Txns))
	ch <- prometheus.MustNewConstMetric(m.conflicts, prometheus.CounterValue, float64(st.Conflicts))
	if m.usageWhen != nil && !m.usageWhen() {
		return // another node exports the cluster's usage
	}
	u, at, err := m.usage()
	if err != nil {
		log.WithError(err).Warn("IPAM metrics: cannot read usage")
		ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, time.Since(at).Seconds())
	for _, p := range u.Pools {
		ch <- prometheus.MustNewConstMetric(m.poolSize, prometheus.GaugeValue, float64(p.Size), p.Name, p.CIDR.String())
		ch <- prometheus.MustNewConstMetric(m.inUse, prometheus.GaugeValue, float64(p.InUse), p.Name)
		ch <- prometheus.MustNewConstMetric(m.borrowed, prometheus.GaugeValue, float64(p.Borrowed), p.Name)
	}
	for node, n := range u.BlocksPerNode() {
		ch <- prometheus.MustNewConstMetric(m.blocks, prometheus.GaugeValue, float64(n), node)
	}
}

// usage accounts from the tallies when they have some; else it returns
// the last read of every block if it is younger than every, or reads
// again; a failed read is not kept (the next scrape tries again).
func (m *Collector) usage() (*Usage, time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.timeout)
	defer cancel()
	if m.tallies != nil {
		u, asOf, ok, err := m.c.UsageFrom(ctx, m.tallies)
		if ok {
			if err != nil {
				return nil, time.Time{}, err
			}
			return u, asOf, nil
		}
	}
	if m.last != nil && time.Since(m.lastAt) < m.every {
		return m.last, m.lastAt, nil
	}
	u, err := m.c.Usage(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	m.last, m.lastAt = u, time.Now()
	return u, m.lastAt, nil
}
