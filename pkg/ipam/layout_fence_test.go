package ipam

import (
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// TestLayoutMoveFenced: moving blocks stored the old way is a write like
// any other: a GC leader that lost its election, or a pass fenced on a
// cluster identity that changed since, moves nothing and says why; the
// current leader then moves them all.
func TestLayoutMoveFenced(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.4.0/26", 28)
	ctx := ctxT(t)
	for _, n := range []string{"n1", "n2"} {
		e.node(n, nil)
		assign(t, c, n, n+"-a")
	}
	toOldLayout(t, e)
	etcd := e.ds.Etcd()
	old := func() int {
		t.Helper()
		resp, err := etcd.Get(ctx, blockPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return int(resp.Count)
	}
	if n := old(); n != 0 {
		t.Fatalf("%d blocks under the new prefix before the move; want 0", n)
	}

	// An election key this process created, then lost (deleted and
	// created again by another campaigner).
	elect := fmt.Sprintf("/test/%s/election", t.Name())
	put, err := etcd.Put(ctx, elect, "me")
	if err != nil {
		t.Fatal(err)
	}
	mine := datastore.Fence{Key: elect, Rev: put.Header.Revision}
	if _, err := etcd.Delete(ctx, elect); err != nil {
		t.Fatal(err)
	}
	again, err := etcd.Put(ctx, elect, "another")
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(e.ds, WithFence(mine)).GC(ctx, time.Hour)
	if !errors.Is(err, datastore.ErrFenced) {
		t.Fatalf("GC by a deposed leader: %v, %+v; want ErrFenced", err, r)
	}
	if n := old(); n != 0 {
		t.Fatalf("a deposed leader moved %d blocks", n)
	}

	// A pass fenced on the cluster identity at a revision it no
	// longer has (restored, reinitialised, marked not ready).
	leader := New(e.ds, WithFence(datastore.Fence{Key: elect, Rev: again.Header.Revision}))
	stale := WithCallFence(ctx, datastore.Fence{Identity: 1})
	if _, err := leader.GC(stale, time.Hour); !errors.Is(err, datastore.ErrFenced) {
		t.Fatalf("GC fenced on a stale cluster identity: %v; want ErrFenced", err)
	}
	if n := old(); n != 0 {
		t.Fatalf("a pass on a stale identity moved %d blocks", n)
	}

	if r, err := leader.GC(ctx, time.Hour); err != nil {
		t.Fatalf("GC by the leader: %v (%q)", err, r.Errors)
	}
	if n := old(); n != 2 {
		t.Fatalf("the leader moved %d blocks; want 2", n)
	}
}
