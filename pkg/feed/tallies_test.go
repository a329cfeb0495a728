package feed_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestBlockTallies: the usage the elected node's metrics account from
// the feed's block tallies (UsageFrom) is the usage a read of every
// block gives (Usage), with the counts the allocations made, and
// follows allocations and releases; a feed that reads no blocks has no
// tallies.
func TestBlockTallies(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	pool(t, ds, "tally", "10.7.0.0/27", 28) // two blocks of 16
	c := ipam.New(ds)
	for i := range 3 {
		assign(t, c, "n1", fmt.Sprint("n1-pod", i))
	}
	assign(t, c, "n2", "n2-pod0")
	assign(t, c, "n2", "n2-pod1")
	assign(t, c, "n3", "n3-pod0") // no block left: borrowed
	rec := &ipamRecorder{}
	fd := startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("rec", []api.Kind{feed.KindBorrowed}, feed.Dispatch{Borrowed: rec})
	})
	none := startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("pools", []api.Kind{api.KindIPPool}, newRecorder())
	})
	ctx := context.Background()
	// summary is what the metrics export of a usage, and each block's
	// account as both ways fill it.
	summary := func(u *ipam.Usage) string {
		s := fmt.Sprintf("blocks per node %v;", u.BlocksPerNode())
		for _, p := range u.Pools {
			s += fmt.Sprintf(" pool %s size %d in use %d borrowed %d free %d:", p.Name, p.Size, p.InUse, p.Borrowed, p.Free)
			for _, b := range p.Blocks {
				s += fmt.Sprintf(" [%s %s node %s size %d in use %d free %d borrowed %d]", b.CIDR, b.Pool, b.Node, b.Size, b.InUse, b.Free, b.Borrowed)
			}
		}
		return s
	}
	check := func(what string, inUse, borrowed int) {
		t.Helper()
		var last string
		for deadline := time.Now().Add(20 * time.Second); ; {
			u, _, ok, err := c.UsageFrom(ctx, fd.BlockTallies)
			read, rerr := c.Usage(ctx)
			if err != nil || rerr != nil {
				t.Fatalf("%s: UsageFrom: %v, Usage: %v", what, err, rerr)
			}
			if ok {
				last = summary(u)
				if len(u.Pools) == 1 && u.Pools[0].InUse == inUse && u.Pools[0].Borrowed == borrowed && last == summary(read) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: from the tallies (ok %v):\n%s\nread from etcd:\n%s\nwant %d in use, %d borrowed", what, ok, last, summary(read), inUse, borrowed)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("the list", 6, 1)
	if _, err := c.ReleaseByHandle(ctx, "n3-pod0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseByHandle(ctx, "n1-pod0"); err != nil {
		t.Fatal(err)
	}
	check("two releases", 4, 0)
	assign(t, c, "n2", "n2-pod2")
	check("an allocation", 5, 0)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if !none.Synced() {
			return "the feed without blocks has not listed"
		}
		return ""
	})
	called := false
	if _, ok := none.BlockTallies(func(_ netip.Prefix, _ ipam.BlockTally) { called = true }); ok || called {
		t.Error("a feed that reads no blocks gave tallies")
	}
}
