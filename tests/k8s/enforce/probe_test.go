package enforce

import (
	"testing"
	"time"
)

func TestChangeAfter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &Prober{samples: map[string][]Sample{}}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// Out of order, as probes finish: a deny at 100 ms, one probe at
	// 140 that still got through (a flap), denied from 160 on.
	p.samples["a"] = []Sample{{At: at(180), Verdict: NoAnswer}, {At: at(-20), Verdict: Connected}, {At: at(20), Verdict: Connected}, {At: at(100), Verdict: NoAnswer},
		{At: at(140), Verdict: Connected}, {At: at(160), Verdict: NoAnswer}, {At: at(60), Verdict: Connected}}
	ch, ok := p.ChangeAfter("a", t0, at(200), false)
	if !ok || ch.After != 160*time.Millisecond || ch.Flaps != 1 {
		t.Errorf("ChangeAfter = %+v, %v; want 160ms, 1 flap", ch, ok)
	}
	if _, ok := p.ChangeAfter("a", t0, at(200), true); ok {
		t.Error("ChangeAfter to allowed: the last probe was denied, want not ok")
	}
	if !p.Settled("a", t0, false, 2) || p.Settled("a", t0, false, 3) {
		t.Error("Settled: want the last 2 probes denied, not the last 3")
	}
	total, answered, connected := p.Count("a", t0, at(200))
	if total != 6 || answered != 3 || connected != 3 {
		t.Errorf("Count = %d %d %d, want 6 3 3", total, answered, connected)
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 50; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for q, want := range map[float64]time.Duration{50: 25 * time.Millisecond, 90: 45 * time.Millisecond, 99: 50 * time.Millisecond, 100: 50 * time.Millisecond} {
		if got := Percentile(ds, q); got != want {
			t.Errorf("p%v = %s, want %s", q, got, want)
		}
	}
	if Percentile(nil, 50) != 0 {
		t.Error("p50 of nothing")
	}
}
