package gc

import (
	"context"
	"net/netip"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
)

// A pass held back by an endpoint record that says nothing readable
// sets routed_ipam_gc_held, with the leak it kept counted; once the
// record is gone the next pass frees the leak and clears it; a node no
// longer leading reports 0.
func TestGCMetricsSayHeld(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	if _, err := noderecord.Register(ctx, ds, "n1", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
		t.Fatal(err)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.53.0.0/24}\n")
	if _, err := ipam.New(ds).AutoAssign(ctx, ipam.AssignArgs{Node: "n1", HandleID: "leaked"}); err != nil {
		t.Fatal(err)
	}
	key := datastore.Key(api.KindWorkloadEndpoint, api.WorkloadEndpointName("n1", "k8s", "default", "w", "", "eth0"))
	if _, err := ds.Etcd().Put(ctx, key, "not json"); err != nil {
		t.Fatal(err)
	}
	fence, _ := elect(t, ds, gcElection+"-metrics", "a")
	m := NewMetrics()
	pass := func(wantHeld, wantLeaks float64) {
		t.Helper()
		m.observe(clusterGC(ctx, ds, fence, 0))
		if h, l := value(t, m.held), value(t, m.leaks); h != wantHeld || l != wantLeaks {
			t.Fatalf("routed_ipam_gc_held %v, routed_ipam_gc_leaks %v; want %v, %v", h, l, wantHeld, wantLeaks)
		}
	}
	pass(1, 1)
	if held, _ := ipam.New(ds).IPsByHandle(ctx, "leaked"); len(held) != 1 {
		t.Fatalf("a held pass freed the leak: handle holds %v", held)
	}
	if _, err := ds.Etcd().Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	pass(0, 1)
	if held, _ := ipam.New(ds).IPsByHandle(ctx, "leaked"); len(held) != 0 {
		t.Fatalf("the leak was not freed once nothing held it: handle holds %v", held)
	}
	m.held.Set(1)
	m.observe(nil)
	if h := value(t, m.held); h != 0 {
		t.Fatalf("routed_ipam_gc_held %v after leading ended, want 0", h)
	}
}

func value(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}
