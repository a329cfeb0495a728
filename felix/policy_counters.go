package felix

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// ErrNoPolicy means felix is not running with the policy dataplane.
var ErrNoPolicy = errors.New("felix: network policy is not running on this node")

// DefaultPolicyCounterPoll is how often felix reads the rule counters
// to tell when each rule last matched.
const DefaultPolicyCounterPoll = 10 * time.Second

// PolicyCounter is one rule's kernel counter and when it last matched.
type PolicyCounter struct {
	Rule    string `json:"rule"`
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
	// LastHit is when felix first saw the counter grow (felix reads the
	// counters every PolicyCounterPoll and when asked: the hit happened
	// at most that long before); nil when it has not grown since felix
	// started watching.
	LastHit *time.Time `json:"lastHit,omitempty"`
	// HitBefore: the counter held packets when felix started watching.
	HitBefore bool `json:"hitBefore,omitempty"`
}

// PolicyCounters reads every policy rule's counter from the kernel now,
// sorted by rule ID, with when each last matched. Rule IDs are
// felix/policy's: "<chain>/<index>" for policy and profile rules,
// "<endpoint chain>/tier-end/<tier>" and ".../no-profile-allowed" for
// the drops of the chains endpoints with the same policies share,
// "unknown-iface/<direction>" for interfaces not programmed. The read
// runs on felix's counter goroutine, never on its programming loop.
func (f *Felix) PolicyCounters(ctx context.Context) ([]PolicyCounter, error) {
	if f.cfg.Features.DisablePolicy {
		return nil, ErrNoPolicy
	}
	req := counterReq{reply: make(chan counterReply, 1)}
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("felix: policy counters: %w", ctx.Err())
	case f.counterReqs <- req:
	}
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("felix: policy counters: %w", ctx.Err())
	case r := <-req.reply:
		return r.cs, r.err
	}
}

type counterReq struct{ reply chan counterReply }

type counterReply struct {
	cs  []PolicyCounter
	err error
}

// pollCounters owns the counter watch: it reads the kernel's counters
// every PolicyCounterPoll and for each request, until ctx ends.
func (f *Felix) pollCounters(ctx context.Context, netnsFd int) {
	r, err := nftdp.NewCounterReader(netnsFd, "")
	if err != nil {
		f.log.WithError(err).Error("policy counters unavailable")
		return
	}
	defer r.Close()
	w := policy.NewCounterWatch(r.Read)
	read := func() ([]PolicyCounter, error) {
		rcs, err := w.Read(time.Now())
		if err != nil {
			return nil, err
		}
		out := make([]PolicyCounter, len(rcs))
		for i, rc := range rcs {
			out[i] = PolicyCounter{Rule: rc.ID, Packets: rc.Packets, Bytes: rc.Bytes, HitBefore: rc.HitBefore}
			if !rc.LastHit.IsZero() {
				t := rc.LastHit
				out[i].LastHit = &t
			}
		}
		return out, nil
	}
	tick := time.NewTicker(f.cfg.PolicyCounterPoll)
	defer tick.Stop()
	f.log.WithField("interval", f.cfg.PolicyCounterPoll).Info("policy counter watch started")
	// The first read is the baseline: what counters hold then matched
	// before felix watched; rules that appear later are new.
	lastErr := ""
	if _, err := read(); err != nil {
		lastErr = err.Error()
		f.log.WithError(err).Warn("reading policy counters failed; rules' last hits are not updated")
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// Said once per distinct error: last hits stall while it lasts.
			if _, err := read(); err != nil && err.Error() != lastErr {
				lastErr = err.Error()
				f.log.WithError(err).Warn("reading policy counters failed; rules' last hits are not updated")
			} else if err == nil {
				lastErr = ""
			}
		case req := <-f.counterReqs:
			cs, err := read()
			req.reply <- counterReply{cs, err}
		}
	}
}

// policyCollector exports the rule counters to Prometheus, read when
// scraped.
type policyCollector struct {
	f                          *Felix
	packets, bytes, unreadable *prometheus.Desc
}

func newPolicyCollector(f *Felix) *policyCollector {
	return &policyCollector{f: f,
		packets:    prometheus.NewDesc("routed_policy_rule_packets_total", "Packets that matched a network policy rule (or an endpoint's default drop), by felix/policy rule ID.", []string{"rule"}, nil),
		bytes:      prometheus.NewDesc("routed_policy_rule_bytes_total", "Bytes that matched a network policy rule (or an endpoint's default drop), by felix/policy rule ID.", []string{"rule"}, nil),
		unreadable: prometheus.NewDesc("routed_policy_unreadable_records", "Stored policy records that do not decode, by kind: felix denies the traffic each could decide (routedctl policy unreadable).", []string{"kind"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.packets
	ch <- c.bytes
	ch <- c.unreadable
}

// Collect implements prometheus.Collector.
func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.f.cfg.Features.DisablePolicy {
		byKind := map[api.Kind]int{}
		for _, k := range append(slices.Clone(UnreadableKinds), api.KindHostEndpoint) {
			byKind[k] = 0
		}
		for _, r := range c.f.UnreadableRecords() {
			byKind[r.Kind]++
		}
		for k, n := range byKind {
			ch <- prometheus.MustNewConstMetric(c.unreadable, prometheus.GaugeValue, float64(n), string(k))
		}
	}
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
