package gc

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestNodePassFencedOnIdentity: a node's own pass (the empty blocks it
// gives back) writes only while the cluster identity it judged trusted
// stays: under a fence of an identity that changed since (the datastore
// marked not ready, as a restore or a migration begins), the release
// fails with ErrFenced naming the identity and the block stays; the
// node pass Run starts is that fenced call, and releases the block once
// the datastore is ready again. Before, only the pass's start checked.
func TestNodePassFencedOnIdentity(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := ds.InitClusterInfo(ctx); err != nil {
		t.Fatal(err)
	}
	dstest.Apply(t, ds, "apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: p}\nspec: {cidr: 10.55.0.0/24, blockSize: 26}\n")
	ic := ipam.New(ds, ipam.WithEmptyBlockGrace(0))
	if _, err := ic.AutoAssign(ctx, ipam.AssignArgs{Node: "n1", HandleID: "h1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ic.ReleaseByHandle(ctx, "h1"); err != nil {
		t.Fatal(err)
	}

	identity, ok := trustedIdentity(ctx, ds, func() bool { return false })
	if !ok {
		t.Fatal("a ready datastore not trusted")
	}
	if _, err := ds.SetDatastoreReady(ctx, false); err != nil {
		t.Fatal(err)
	}
	fctx := ipam.WithCallFence(ctx, datastore.Fence{Identity: identity})
	got, err := ic.ReleaseEmptyBlocks(fctx, "n1")
	if !errors.Is(err, datastore.ErrFenced) || !strings.Contains(err.Error(), "cluster identity changed") || len(got) != 0 {
		t.Fatalf("release under the identity of before the datastore was marked not ready: %v, %v; want ErrFenced naming the identity", got, err)
	}
	if blocks, err := ic.BlocksForNode(ctx, "n1"); err != nil || len(blocks) != 1 {
		t.Fatalf("n1's empty block must stay: %+v, %v", blocks, err)
	}
	if _, ok := trustedIdentity(ctx, ds, func() bool { return false }); ok {
		t.Fatal("a datastore marked not ready judged trusted")
	}

	// Ready again: the node pass Run starts releases the block.
	if _, err := ds.SetDatastoreReady(ctx, true); err != nil {
		t.Fatal(err)
	}
	var leading atomic.Bool
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{DS: ds, IPAM: ic, Node: "n1", Period: 50 * time.Millisecond, Grace: time.Hour,
			Held: func() bool { return false }, Leading: &leading})
	}()
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() string {
		blocks, err := ic.BlocksForNode(ctx, "n1")
		if err != nil || len(blocks) != 0 {
			return "n1 still has its empty block"
		}
		return ""
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
