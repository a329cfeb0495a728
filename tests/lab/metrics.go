package lab

import (
	"context"
	"fmt"
	"io"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metrics is a scrape of a Prometheus /metrics page, read by the
// Prometheus text parser: metric families by name.
type Metrics map[string]*dto.MetricFamily

// ParseMetrics reads the Prometheus text exposition format.
func ParseMetrics(r io.Reader) (Metrics, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	return fams, nil
}

// NodeMetricFamilies fetches and parses a node's Prometheus metrics.
func (l *Lab) NodeMetricFamilies(ctx context.Context, node string) (Metrics, error) {
	text, err := l.NodeMetrics(ctx, node)
	if err != nil {
		return nil, err
	}
	return ParseMetrics(strings.NewReader(text))
}

// Sum adds the values of the samples of family name whose labels include
// every pair in labels (nil: all samples); found is false when no sample
// matched. Counters, gauges and untyped samples have values; other
// types count as 0.
func (m Metrics) Sum(name string, labels map[string]string) (sum float64, found bool) {
	f := m[name]
	if f == nil {
		return 0, false
	}
	for _, s := range f.GetMetric() {
		if hasLabels(s, labels) {
			sum += sampleValue(s)
			found = true
		}
	}
	return sum, found
}

// SumBy is Sum split by the value of label key.
func (m Metrics) SumBy(name, key string, labels map[string]string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m[name].GetMetric() {
		if !hasLabels(s, labels) {
			continue
		}
		for _, lp := range s.GetLabel() {
			if lp.GetName() == key {
				out[lp.GetValue()] += sampleValue(s)
			}
		}
	}
	return out
}

// HasPrefix reports whether some family's name starts with prefix.
func (m Metrics) HasPrefix(prefix string) bool {
	for name := range m {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

func hasLabels(s *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range s.GetLabel() {
		if v, ok := want[lp.GetName()]; ok && v == lp.GetValue() {
			n++
		}
	}
	return n == len(want)
}

func sampleValue(s *dto.Metric) float64 {
	switch {
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Untyped != nil:
		return s.Untyped.GetValue()
	}
	return 0
}
