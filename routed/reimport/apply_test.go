package reimport

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestApplyTellsItsPlanAndStopsWhenCancelled: Apply says what it will
// write before the first write, and a cancelled context (the daemon's
// SIGTERM, or a datastore no longer trusted) stops it before it writes;
// a later Apply puts every pod back.
func TestApplyTellsItsPlanAndStopsWhenCancelled(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.60.0.0/24}\n")
	var live []*api.WorkloadEndpoint
	for i := 1; i <= 3; i++ {
		pod := fmt.Sprintf("web-%d", i)
		live = append(live, &api.WorkloadEndpoint{
			Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName("n1", "k8s", "ns1", pod, "", "eth0")},
			Spec: api.WorkloadEndpointSpec{Node: "n1", Orchestrator: "k8s", Namespace: "ns1", Pod: pod,
				ContainerID: "c" + pod, InterfaceName: fmt.Sprintf("cali%011d", i), Handle: "h-" + pod,
				IPNetworks: []string{fmt.Sprintf("10.60.0.%d/32", 10+i)}}})
	}
	r := New(Config{DS: ds, IPAM: ipam.New(ds), Node: "n1",
		Endpoints:  func(context.Context) ([]*api.WorkloadEndpoint, error) { return live, nil },
		LinkExists: func(string) bool { return true },
		Held:       func() (bool, string) { return true, "restored" }})

	cctx, cancel := context.WithCancel(ctx)
	var plan *Report
	_, err := r.Apply(cctx, func(rep *Report) { plan = rep; cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply cancelled in its plan: %v, want context.Canceled", err)
	}
	if plan == nil || len(plan.Missing) != 3 || plan.Live != 3 {
		t.Fatalf("plan: %+v, want 3 live pods, 3 missing", plan)
	}
	if all, _, err := ds.List(ctx, api.KindWorkloadEndpoint); err != nil || len(all) != 0 {
		t.Fatalf("a cancelled Apply wrote %d endpoints (%v)", len(all), err)
	}

	rep, err := r.Apply(ctx, nil)
	if err != nil || len(rep.Missing) != 3 || len(rep.Failed) != 0 {
		t.Fatalf("Apply: %+v, %v", rep, err)
	}
	if rep, err := r.Run(ctx, true); err != nil || rep.Problems() != 0 {
		t.Fatalf("after Apply a dry run finds %+v, %v", rep, err)
	}
}
