package gc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestIdentityChangedMidGC: the datastore marked not ready (a migration
// or a restore begins) in the middle of a cluster-wide pass refuses the
// rest of the pass's writes: the node GC's deletes and the IPAM GC's
// frees fail with ErrFenced naming the identity, and nothing is removed.
// Before, only the pass's start checked the identity.
func TestIdentityChangedMidGC(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.54.0.0/24}\n")
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: gone-k8s-default-w-eth0}\nspec: {node: gone, containerID: c1, interfaceName: cali1, ipNetworks: [10.54.0.1/32]}\n")
	if _, err := ipam.New(ds).AutoAssign(ctx, ipam.AssignArgs{Node: "gone", HandleID: "leaked"}); err != nil {
		t.Fatal(err)
	}
	fence, _ := elect(t, ds, gcElection+"-identity", "leader")
	trusted := func() bool { return false }
	identity, ok := trustedIdentity(ctx, ds, trusted)
	if !ok || identity == 0 {
		t.Fatalf("a ready datastore not trusted: %d, %v", identity, ok)
	}
	fence.Identity = identity

	t0 := time.Now()
	g := &nodeGC{ds: ds, fence: fence, grace: time.Hour, now: func() time.Time { return t0 }}
	if _, err := g.run(ctx); err != nil { // writes the missing-since record
		t.Fatalf("first pass, identity unchanged: %v", err)
	}
	g.now = func() time.Time { return t0.Add(time.Hour) }
	g.reclaiming = func(map[string]bool) {
		if _, err := ds.SetDatastoreReady(ctx, false); err != nil {
			t.Error(err)
		}
	}
	_, err := g.run(ctx)
	if !errors.Is(err, datastore.ErrFenced) || !strings.Contains(err.Error(), "cluster identity changed") {
		t.Fatalf("node GC pass during which the datastore was marked not ready: %v, want ErrFenced naming the identity", err)
	}
	if !wepExists(t, ds, "gone-k8s-default-w-eth0") {
		t.Error("the pass removed an endpoint after the datastore was marked not ready")
	}
	if _, err := ipam.New(ds, ipam.WithFence(fence)).GC(ctx, 0); !errors.Is(err, datastore.ErrFenced) || !strings.Contains(err.Error(), "cluster identity changed") {
		t.Fatalf("IPAM GC after the datastore was marked not ready: %v, want ErrFenced naming the identity", err)
	}
	if rep, err := ipam.New(ds).Check(ctx, 0); err != nil || len(rep.Leaks) != 1 {
		t.Fatalf("the leak must still be there: %+v, %v", rep, err)
	}

	// Ready again: a new judgement, a new fence; the old one stays broken.
	if _, err := ds.SetDatastoreReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := ipam.New(ds, ipam.WithFence(fence)).GC(ctx, 0); !errors.Is(err, datastore.ErrFenced) {
		t.Fatalf("IPAM GC under the fence of before: %v, want ErrFenced", err)
	}
	if _, ok := trustedIdentity(ctx, ds, func() bool { return true }); ok {
		t.Fatal("trusted while held")
	}
	again, ok := trustedIdentity(ctx, ds, trusted)
	if !ok || again == identity {
		t.Fatalf("ready again: identity %d (was %d), %v", again, identity, ok)
	}
	fence.Identity = again
	rep, err := ipam.New(ds, ipam.WithFence(fence)).GC(ctx, 0)
	if err != nil || len(rep.Released) != 1 {
		t.Fatalf("IPAM GC under the new fence: %+v, %v; want the leak released", rep, err)
	}
}

// TestTrustedIdentityNotReady: a datastore marked not ready is not
// trusted, whatever held says.
func TestTrustedIdentityNotReady(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	if _, ok := trustedIdentity(ctx, ds, func() bool { return false }); ok {
		t.Fatal("trusted without an identity")
	}
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := trustedIdentity(ctx, ds, func() bool { return false }); ok {
		t.Fatal("trusted while marked not ready")
	}
}
