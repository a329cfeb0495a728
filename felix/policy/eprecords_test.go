package policy

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestEndpointRecordsChurn: endpoint records made from chunks, their
// structs reused and their keys compacted under churn, leave the model
// writing exactly what a calculator given only the final endpoints
// writes (sets' members, local endpoints' chains and dispatch), find
// every endpoint by its key, and reuse freed structs instead of making
// new chunks.
func TestEndpointRecordsChurn(t *testing.T) {
	policies := func(c *Calc) {
		mustPolicy(t, c, gnpYAML("web", "10", "default", "  selector: app == 'web'\n  ingress: [{action: Allow, source: {selector: app == 'client'}}]"))
		mustPolicy(t, c, gnpYAML("db", "20", "default", "  selector: app == 'db'\n  ingress: [{action: Allow, source: {selector: \"app in {'web', 'client'}\"}}]"))
	}
	s1 := newRecSink()
	c1 := NewCalc(s1, LogConfig{})
	policies(c1)
	rng := rand.New(rand.NewPCG(1, 36))
	apps := []string{"web", "client", "db", "other"}
	final := map[string]Endpoint{}
	maxLive := 0
	const keys = 3000
	for i := range 60000 {
		n := rng.IntN(keys)
		// Long keys, as a pod's WorkloadEndpoint name is: the dead
		// bytes pass the compaction threshold within the churn.
		key := fmt.Sprintf("node-%04d-k8s-app-%s-7d4b9c8f6d-%05d-eth0", n%100, apps[n%4], n)
		if rng.IntN(3) == 0 {
			c1.DeleteEndpoint(key)
			delete(final, key)
			continue
		}
		e := ep(key, n%50 == 0, fmt.Sprintf("10.%d.%d.%d", n>>16, (n>>8)&255, n&255),
			map[string]string{"app": apps[rng.IntN(len(apps))]})
		e.Iface = fmt.Sprintf("cali%07d", n)
		if rng.IntN(10) == 0 {
			e.IPs = append(e.IPs, netip.MustParsePrefix(fmt.Sprintf("fd00::%x/128", i)))
		}
		c1.SetEndpoint(e)
		final[key] = e
		maxLive = max(maxLive, len(final))
	}
	if c1.recs.compactions == 0 {
		t.Fatalf("no compaction of the keys in the churn (used %d, live %d bytes)", c1.recs.keyUsed, c1.recs.keyLive)
	}
	live := 0
	for k := range final {
		live += len(k)
	}
	if c1.recs.keyLive != live {
		t.Errorf("live key bytes counted %d, the endpoints' keys are %d", c1.recs.keyLive, live)
	}
	if slots := c1.recs.chunks * epChunk; slots > maxLive+epChunk {
		t.Errorf("%d chunks (%d structs) for at most %d endpoints at once: freed structs not reused", c1.recs.chunks, slots, maxLive)
	}
	if got, want := c1.Endpoints(), slices.Sorted(maps.Keys(final)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Fatalf("endpoints after the churn: %d, want %d", len(got), len(want))
	}
	for k, e := range final {
		got := c1.endpoint(k)
		if got == nil || got.key != k || !got.sameIPs(e.IPs) || !ownIs(got.g.own, "app", e.Labels["app"]) {
			t.Fatalf("endpoint %s after the churn: %+v", k, got)
		}
	}

	s2 := newRecSink()
	c2 := NewCalc(s2, LogConfig{})
	policies(c2)
	for _, k := range slices.Sorted(maps.Keys(final)) {
		c2.SetEndpoint(final[k])
	}
	members := 0
	for _, m := range s2.sets {
		members += len(m)
	}
	if members == 0 || len(s2.eps) == 0 {
		t.Fatalf("the final endpoints make %d set members and %d local dispatch entries: nothing compared", members, len(s2.eps))
	}
	t.Logf("%d endpoints, %d set members, %d local; %d chunks, %d key compactions", len(final), members, len(s2.eps), c1.recs.chunks, c1.recs.compactions)
	if !maps.EqualFunc(s1.sets, s2.sets, maps.Equal) {
		t.Errorf("sets after the churn differ from the final endpoints' (%d sets against %d)", len(s1.sets), len(s2.sets))
	}
	if !maps.Equal(s1.eps, s2.eps) || !maps.Equal(s1.fams, s2.fams) {
		t.Errorf("dispatch after the churn differs from the final endpoints' (%d against %d)", len(s1.eps), len(s2.eps))
	}
	if !slices.Equal(slices.Sorted(maps.Keys(s1.chains)), slices.Sorted(maps.Keys(s2.chains))) {
		t.Errorf("chains after the churn: %v, want %v", slices.Sorted(maps.Keys(s1.chains)), slices.Sorted(maps.Keys(s2.chains)))
	}
}

func ownIs(o ownLabels, k, v string) bool {
	got, ok := o.get(k)
	return ok && got == v
}
