package gc

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/noderecord"
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
	ds := dstest.Client(t)
	ctx := context.Background()
	for _, n := range []string{"alive", "gone"} {
		if _, err := noderecord.Register(ctx, ds, n, noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
			t.Fatal(err)
		}
		// Endpoints created long ago, as a long-running pod's are.
		w := "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: " + n + "-k8s-default-w-eth0, creationTimestamp: \"2020-01-01T00:00:00Z\"}\nspec: {node: " + n + ", containerID: c1, interfaceName: cali1, ipNetworks: [10.1.0.1/32]}\n"
		dstest.Apply(t, ds, w)
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
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: gone-k8s-default-w2-eth0}\nspec: {node: gone, containerID: c2, interfaceName: cali2, ipNetworks: [10.1.0.2/32]}\n")
	if _, err := noderecord.Register(ctx, ds, "gone", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.6/24")}); err != nil {
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
	ds := dstest.Client(t)
	ctx := context.Background()
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.52.0.0/24}\n")
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: gone-k8s-default-w-eth0}\nspec: {node: gone, containerID: c1, interfaceName: cali1, ipNetworks: [10.52.0.1/32]}\n")
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
	if _, err := ic.GC(ctx, 0); !errors.Is(err, datastore.ErrFenced) || !strings.Contains(err.Error(), "no longer holds the election") {
		t.Fatalf("IPAM GC by a deposed leader: %v, want ErrFenced naming the election", err)
	}
	if rep, err := ipam.New(ds).Check(ctx, 0); err != nil || len(rep.Leaks) != 1 {
		t.Fatalf("the leak must still be there: %+v, %v", rep, err)
	}
}

// TestNodeGCSparesANodeThatComesBack: a node that re-registers after the
// pass decided it was gone (and before its endpoints were deleted) keeps
// them: every delete is conditioned on the Node record still being
// absent.
func TestNodeGCSparesANodeThatComesBack(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: back-k8s-default-w-eth0}\nspec: {node: back, containerID: c1, interfaceName: cali1, ipNetworks: [10.1.0.1/32]}\n")
	fence, _ := elect(t, ds, gcElection+"-back", "a")
	t0 := time.Now()
	g := &nodeGC{ds: ds, fence: fence, grace: time.Minute, now: func() time.Time { return t0 }}
	if _, err := g.run(ctx); err != nil {
		t.Fatal(err)
	}
	g.now = func() time.Time { return t0.Add(time.Minute) }
	g.reclaiming = func(gone map[string]bool) {
		if !gone["back"] {
			t.Errorf("the pass did not find node back gone: %v", gone)
		}
		if _, err := noderecord.Register(ctx, ds, "back", noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.7/24")}); err != nil {
			t.Error(err)
		}
	}
	gone, err := g.run(ctx)
	if err != nil || len(gone) != 0 {
		t.Fatalf("node back re-registered during the pass: gone %v, %v; want none", gone, err)
	}
	if !wepExists(t, ds, "back-k8s-default-w-eth0") {
		t.Fatal("endpoint of a node that came back during GC was removed")
	}
}

// TestLeaderDeposedMidGC: the elected GC runs through runAsLeader; its
// lease is revoked in the middle of a pass (after it decided a node was
// gone, before it deleted anything). Every write it then makes fails
// with ErrFenced, nothing is reclaimed, and its context is cancelled.
func TestLeaderDeposedMidGC(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.53.0.0/24}\n")
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: WorkloadEndpoint\nmetadata: {name: gone-k8s-default-w-eth0}\nspec: {node: gone, containerID: c1, interfaceName: cali1, ipNetworks: [10.53.0.1/32]}\n")
	if _, err := ipam.New(ds).AutoAssign(ctx, ipam.AssignArgs{Node: "gone", HandleID: "leaked"}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		first, second, ipamErr error
		stopped                bool
	}
	done := make(chan result, 1)
	election := gcElection + "-mid"
	go runAsLeader(ctx, ds, election, "old", func(lctx context.Context, fence datastore.Fence) {
		var r result
		t0 := time.Now()
		g := &nodeGC{ds: ds, fence: fence, grace: time.Hour, now: func() time.Time { return t0 }}
		_, r.first = g.run(lctx) // writes the missing-since record: it leads
		g.now = func() time.Time { return t0.Add(time.Hour) }
		g.reclaiming = func(map[string]bool) {
			kv, err := ds.Etcd().Get(ctx, fence.Key)
			if err != nil || len(kv.Kvs) != 1 {
				t.Errorf("reading the election key: %v", err)
				return
			}
			if _, err := ds.Etcd().Revoke(ctx, clientv3.LeaseID(kv.Kvs[0].Lease)); err != nil {
				t.Error(err)
			}
		}
		_, r.second = g.run(lctx)
		_, r.ipamErr = ipam.New(ds, ipam.WithFence(fence)).GC(ctx, 0)
		select {
		case <-lctx.Done():
			r.stopped = true
		case <-time.After(20 * time.Second):
		}
		done <- r
		cancel() // stop campaigning again
	})
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the GC leader never ran")
	}
	if r.first != nil {
		t.Fatalf("first pass as leader: %v", r.first)
	}
	// The pass's context is cancelled when the leadership is seen lost,
	// which may come before the fenced delete is refused: either stops
	// it, never a pass reported as done.
	if !errors.Is(r.second, datastore.ErrFenced) && !errors.Is(r.second, context.Canceled) {
		t.Errorf("node GC pass during which the leader was deposed: %v, want ErrFenced or context.Canceled", r.second)
	}
	if !errors.Is(r.ipamErr, datastore.ErrFenced) {
		t.Errorf("IPAM GC by the deposed leader: %v, want ErrFenced", r.ipamErr)
	}
	if !r.stopped {
		t.Error("runAsLeader did not cancel the deposed leader's context within 20 s")
	}
	if !wepExists(t, ds, "gone-k8s-default-w-eth0") {
		t.Error("a deposed leader removed an endpoint")
	}
	if rep, err := ipam.New(ds).Check(context.Background(), 0); err != nil || len(rep.Leaks) != 1 {
		t.Errorf("the leak must still be there: %+v, %v", rep, err)
	}
}

// An endpoint record that does not decode goes with its node: the node
// is read from its name. Before, the pass skipped it, and it stayed for
// ever (and with it every node's deny of its addresses). One of a live
// node stays, as does one whose name names no node.
func TestNodeGCRemovesUnreadableEndpoints(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx := context.Background()
	for _, n := range []string{"live-1", "gone-1"} {
		if _, err := noderecord.Register(ctx, ds, n, noderecord.Addresses{V4: netip.MustParsePrefix("10.0.0.5/24")}); err != nil {
			t.Fatal(err)
		}
	}
	names := map[string]string{
		"live-1": api.WorkloadEndpointName("live-1", "k8s", "default", "w", "", "eth0"),
		"gone-1": api.WorkloadEndpointName("gone-1", "k8s", "default", "w", "", "eth0"),
		"none":   "nonode",
	}
	for _, name := range names {
		if _, err := ds.Etcd().Put(ctx, datastore.Key(api.KindWorkloadEndpoint, name), `{"spec": {"ports": 1`); err != nil {
			t.Fatal(err)
		}
	}
	if err := ds.Delete(ctx, api.KindNode, "gone-1", ""); err != nil {
		t.Fatal(err)
	}
	grace := time.Hour
	t0 := time.Now()
	fence, _ := elect(t, ds, gcElection+"-unreadable", "a")
	g := &nodeGC{ds: ds, fence: fence, grace: grace, now: func() time.Time { return t0 }}
	if gone, err := g.run(ctx); err != nil || len(gone) != 0 {
		t.Fatalf("first pass: gone %v, %v", gone, err)
	}
	if !rawExists(t, ds, names["gone-1"]) {
		t.Fatal("unreadable endpoint of a node missing for 0s removed")
	}
	g.now = func() time.Time { return t0.Add(grace) }
	gone, err := g.run(ctx)
	if err != nil || !gone["gone-1"] || len(gone) != 1 {
		t.Fatalf("second pass: gone %v, %v; want gone-1", gone, err)
	}
	if rawExists(t, ds, names["gone-1"]) {
		t.Error("unreadable endpoint of a node gone for the grace period kept")
	}
	for _, n := range []string{"live-1", "none"} {
		if !rawExists(t, ds, names[n]) {
			t.Errorf("unreadable endpoint %s removed", names[n])
		}
	}
}

func rawExists(t *testing.T, ds *datastore.Client, name string) bool {
	t.Helper()
	resp, err := ds.Etcd().Get(context.Background(), datastore.Key(api.KindWorkloadEndpoint, name), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count > 0
}
