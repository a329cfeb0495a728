package daemon

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// elect campaigns in election as name and returns the fence and the
// session (closing it loses the election).
func elect(t *testing.T, ds *datastore.Client, election, name string) (datastore.Fence, *concurrency.Session) {
	t.Helper()
	sess, err := concurrency.NewSession(ds.Etcd(), concurrency.WithTTL(5))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	e := concurrency.NewElection(sess, election)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.Campaign(ctx, name); err != nil {
		t.Fatal(err)
	}
	return datastore.Fence{Key: e.Key(), Rev: e.Rev()}, sess
}

func wepExists(t *testing.T, ds *datastore.Client, name string) bool {
	t.Helper()
	_, err := ds.Get(context.Background(), api.KindWorkloadEndpoint, name)
	if err != nil && !datastore.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestNodeGCCountsFromMissing reproduces the fault (a live node's Node
// record deleted: its endpoints were removed at once, the grace counted
// from the endpoint's creation) and checks the fix: the grace counts
// from when the node went missing, the clock survives a change of
// leader, and a node that comes back is forgotten.
func TestNodeGCCountsFromMissing(t *testing.T) {
	t.Parallel()
	ds := newDS(t)
	ctx := context.Background()
	for _, n := range []string{"alive", "gone"} {
		if _, err := RegisterNode(ctx, ds, n, netip.MustParsePrefix("10.0.0.5/24")); err != nil {
			t.Fatal(err)
		}
		// Endpoints created long ago, as a long-running pod's are.
		w := "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: " + n + "-k8s-default-w-eth0, creationTimestamp: \"2020-01-01T00:00:00Z\"}\nspec: {node: " + n + ", containerID: c1, interfaceName: cali1, ipNetworks: [10.1.0.1/32]}\n"
		apply(t, ds, w)
	}
	if err := ds.Delete(ctx, api.KindNode, "gone", ""); err != nil {
		t.Fatal(err)
	}
	grace := time.Hour
	t0 := time.Now()
	fenceA, sessA := elect(t, ds, gcElection+"-missing", "a")
	a := &nodeGC{ds: ds, fence: fenceA, grace: grace, now: func() time.Time { return t0 }}
	if gone, err := a.run(ctx); err != nil || len(gone) != 0 {
		t.Fatalf("first pass: gone %v, %v", gone, err)
	}
	if !wepExists(t, ds, "gone-k8s-default-w-eth0") {
		t.Fatal("endpoint of a node missing for 0s removed (the fault)")
	}
	// The leader changes; the new one keeps the old clock.
	sessA.Close()
	fenceB, _ := elect(t, ds, gcElection+"-missing", "b")
	b := &nodeGC{ds: ds, fence: fenceB, grace: grace, now: func() time.Time { return t0.Add(grace - time.Minute) }}
	if gone, err := b.run(ctx); err != nil || len(gone) != 0 || !wepExists(t, ds, "gone-k8s-default-w-eth0") {
		t.Fatalf("new leader before the grace ended: gone %v, %v", gone, err)
	}
	b.now = func() time.Time { return t0.Add(grace) }
	gone, err := b.run(ctx)
	if err != nil || !gone["gone"] || len(gone) != 1 {
		t.Fatalf("after the grace: gone %v, %v", gone, err)
	}
	if wepExists(t, ds, "gone-k8s-default-w-eth0") || !wepExists(t, ds, "alive-k8s-default-w-eth0") {
		t.Fatal("after the grace: want the missing node's endpoint removed and the live one's kept")
	}

	// A node that comes back is forgotten: its clock restarts if it goes
	// missing again.
	apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: gone-k8s-default-w2-eth0}\nspec: {node: gone, containerID: c2, interfaceName: cali2, ipNetworks: [10.1.0.2/32]}\n")
	if _, err := RegisterNode(ctx, ds, "gone", netip.MustParsePrefix("10.0.0.6/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.run(ctx); err != nil {
		t.Fatal(err)
	}
	if m, err := b.readMissing(ctx); err != nil || len(m) != 0 {
		t.Fatalf("missing records after the node came back: %v, %v", m, err)
	}
}

// TestDeposedLeaderCannotWrite: a leader whose election was lost (its
// lease revoked, as after a long pause) gets ErrFenced for every GC
// write, from node GC and from IPAM GC alike.
func TestDeposedLeaderCannotWrite(t *testing.T) {
	t.Parallel()
	ds := newDS(t)
	ctx := context.Background()
	apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.52.0.0/24}\n")
	apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: gone-k8s-default-w-eth0}\nspec: {node: gone, containerID: c1, interfaceName: cali1, ipNetworks: [10.52.0.1/32]}\n")
	if _, err := ipam.New(ds).AutoAssign(ctx, ipam.AssignArgs{Node: "gone", HandleID: "leaked"}); err != nil {
		t.Fatal(err)
	}
	fence, sess := elect(t, ds, gcElection+"-fence", "old")
	if _, err := ds.Etcd().Revoke(ctx, sess.Lease()); err != nil {
		t.Fatal(err)
	}
	elect(t, ds, gcElection+"-fence", "new")

	g := &nodeGC{ds: ds, fence: fence, grace: 0, now: time.Now}
	if _, err := g.run(ctx); !errors.Is(err, datastore.ErrFenced) {
		t.Fatalf("node GC by a deposed leader: %v, want ErrFenced", err)
	}
	if m, _ := g.readMissing(ctx); len(m) != 0 {
		t.Fatalf("a deposed leader wrote missing-node records: %v", m)
	}
	ic := ipam.New(ds, ipam.WithFence(fence))
	if _, err := ic.GC(ctx, 0); !errors.Is(err, datastore.ErrFenced) {
		t.Fatalf("IPAM GC by a deposed leader: %v, want ErrFenced", err)
	}
	if rep, err := ipam.New(ds).Check(ctx, 0); err != nil || len(rep.Leaks) != 1 {
		t.Fatalf("the leak must still be there: %+v, %v", rep, err)
	}
}
