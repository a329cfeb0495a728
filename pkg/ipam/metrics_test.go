package ipam

import (
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "one-block", "10.14.0.0/28", 28)
	assign(t, c, "n1", "a")
	assign(t, c, "n1", "b")
	assign(t, c, "n2", "borrowed")

	got := gather(t, NewCollector(New(e.ds), 0))
	want := map[string]float64{
		"routed_ipam_up": 1,
		"routed_ipam_pool_size,cidr=10.14.0.0/28,pool=one-block": 16,
		"routed_ipam_allocations_in_use,pool=one-block":          3,
		"routed_ipam_allocations_borrowed,pool=one-block":        1,
		"routed_ipam_blocks_per_node,node=n1":                    1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

// gather scrapes col once: each metric's value by its name and labels
// ("name,label=value,...").
func gather(t *testing.T, col prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = value(m)
		}
	}
	return got
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

// TestCollectorUsageOnlyWhenAsked: a collector told it is not the one
// exporting usage reads nothing from etcd at scrape time (every node
// scraping every block was a full IPAM listing per node per scrape).
func TestCollectorUsageOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "p", "10.11.0.0/24", 26)
	assign(t, c, "n1", "h1")
	var leading atomic.Bool
	col := NewCollector(c, time.Second).UsageWhen(leading.Load)
	count := func() (metrics int, gets uint64) {
		before := c.Stats().Gets + c.Stats().Txns
		ch := make(chan prometheus.Metric, 100)
		col.Collect(ch)
		close(ch)
		for range ch {
			metrics++
		}
		return metrics, c.Stats().Gets + c.Stats().Txns - before
	}
	if n, reads := count(); n != 2 || reads != 0 {
		t.Errorf("not leading: %d metrics, %d reads; want the 2 counters and no read", n, reads)
	}
	leading.Store(true)
	if n, _ := count(); n <= 2 {
		t.Errorf("leading: %d metrics, want usage too", n)
	}
}

// TestCollectorUsageEvery: the usage read (every block of the cluster)
// serves the scrapes of the next UsageEvery without reading again, says
// its age, and is read again once older.
func TestCollectorUsageEvery(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "p", "10.12.0.0/24", 26)
	assign(t, c, "n1", "h1")
	col := NewCollector(c, 5*time.Second)
	scrape := func() (inUse, age float64, reads uint64) {
		t.Helper()
		before := c.Stats().Gets + c.Stats().Txns
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(col)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "routed_ipam_allocations_in_use":
				inUse = value(mf.GetMetric()[0])
			case "routed_ipam_usage_age_seconds":
				age = value(mf.GetMetric()[0])
			}
		}
		return inUse, age, c.Stats().Gets + c.Stats().Txns - before
	}
	if n, _, reads := scrape(); n != 1 || reads == 0 {
		t.Fatalf("first scrape: %v in use, %d reads; want 1 from a read", n, reads)
	}
	assign(t, c, "n1", "h2")
	if n, age, reads := scrape(); n != 1 || reads != 0 || age < 0 || age > 60 {
		t.Errorf("second scrape within a minute: %v in use, age %v s, %d reads; want the first read's 1, no read", n, age, reads)
	}
	col.UsageEvery(0)
	if n, _, reads := scrape(); n != 2 || reads == 0 {
		t.Errorf("scrape after the read expired: %v in use, %d reads; want 2 from a new read", n, reads)
	}
}

// TestCollectorTallies: given tallies the collector exports them against
// the pools, at every scrape, reading the pools only (no block page), as
// old as the tallies say; while the tallies have none it reads every
// block as without them.
func TestCollectorTallies(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "p", "10.15.0.0/24", 26)
	assign(t, c, "n1", "h1") // what a read of the blocks finds
	have := true
	tallies := func(fn func(netip.Prefix, BlockTally)) (time.Time, bool) {
		if have {
			fn(netip.MustParsePrefix("10.15.0.64/26"), BlockTally{Node: "n2", InUse: 7, Borrowed: 2})
			fn(netip.MustParsePrefix("10.15.0.128/26"), BlockTally{Node: "n3", InUse: 1})
		}
		return time.Now().Add(-10 * time.Second), have
	}
	col := NewCollector(c, 5*time.Second).Tallies(tallies)
	scrape := func() (got map[string]float64, gets uint64) {
		t.Helper()
		before := c.Stats().Gets
		got = gather(t, col)
		return got, c.Stats().Gets - before
	}
	for i := range 2 {
		got, pages := scrape()
		want := map[string]float64{"routed_ipam_allocations_in_use,pool=p": 8, "routed_ipam_allocations_borrowed,pool=p": 2,
			"routed_ipam_blocks_per_node,node=n2": 1, "routed_ipam_blocks_per_node,node=n3": 1, "routed_ipam_blocks_per_node,node=n1": 0,
			"routed_ipam_pool_size,cidr=10.15.0.0/24,pool=p": 256}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("scrape %d from the tallies: %s = %v, want %v (all: %v)", i, k, got[k], v, got)
			}
		}
		if pages != 0 {
			t.Errorf("scrape %d from the tallies read %d pages of blocks or affinities, want none", i, pages)
		}
		if age := got["routed_ipam_usage_age_seconds"]; age < 10 || age > 20 {
			t.Errorf("scrape %d from the tallies: age %v s, want the tallies' 10 s", i, age)
		}
	}
	have = false
	got, pages := scrape()
	if got["routed_ipam_allocations_in_use,pool=p"] != 1 || got["routed_ipam_blocks_per_node,node=n1"] != 1 || pages == 0 {
		t.Errorf("without tallies: %v after %d pages, want n1's one allocation read from the blocks", got, pages)
	}
}
