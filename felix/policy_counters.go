package felix

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// ErrNoPolicy means felix is not running with the policy dataplane.
var ErrNoPolicy = errors.New("felix: network policy is not running on this node")

// PolicyCounter is one rule's kernel counter.
type PolicyCounter struct {
	Rule    string `json:"rule"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// PolicyCounters reads every policy rule's counter from the kernel, on
// felix's goroutine (which owns the tables), sorted by rule ID. Rule IDs
// are felix/policy's: "<chain>/<index>" for policy and profile rules,
// "<iface>/<direction>/tier-end/<tier>" and ".../no-profile-allowed" for
// an endpoint's drops, "unknown-iface/<direction>" for interfaces not
// programmed.
func (f *Felix) PolicyCounters(ctx context.Context) ([]PolicyCounter, error) {
	type result struct {
		m   map[string]nftdp.Counter
		err error
	}
	ch := make(chan result, 1)
	f.enqueue(func(l *loop) {
		if l.policy == nil {
			ch <- result{err: ErrNoPolicy}
			return
		}
		m, err := l.policy.Counters()
		ch <- result{m, err}
	})
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case r := <-ch:
		if r.err != nil {
			return nil, r.err
		}
		out := make([]PolicyCounter, 0, len(r.m))
		for id, c := range r.m {
			out = append(out, PolicyCounter{Rule: id, Packets: c.Packets, Bytes: c.Bytes})
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Rule < out[j].Rule })
		return out, nil
	}
}

// policyCollector exports the rule counters to Prometheus, read when
// scraped.
type policyCollector struct {
	f              *Felix
	packets, bytes *prometheus.Desc
}

func newPolicyCollector(f *Felix) *policyCollector {
	return &policyCollector{f: f,
		packets: prometheus.NewDesc("routed_policy_rule_packets_total", "Packets that matched a network policy rule (or an endpoint's default drop), by felix/policy rule ID.", []string{"rule"}, nil),
		bytes:   prometheus.NewDesc("routed_policy_rule_bytes_total", "Bytes that matched a network policy rule (or an endpoint's default drop), by felix/policy rule ID.", []string{"rule"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.packets; ch <- c.bytes }

// Collect implements prometheus.Collector.
func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cs, err := c.f.PolicyCounters(ctx)
	if err != nil {
		return
	}
	for _, p := range cs {
		ch <- prometheus.MustNewConstMetric(c.packets, prometheus.CounterValue, float64(p.Packets), p.Rule)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(p.Bytes), p.Rule)
	}
}
