package felix_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
)

// TestFeedBacklogStaysInTheFeed: felix's feed consumer returns only once
// felix's Run loop has taken the batch. Before Run starts, while the loop
// is wedged and after Run returned, the batch waits in the feed, which
// names felix as a stalled consumer (what liveness asks); once a loop
// runs it takes the batch and programs it. The direct input methods
// never wait, with or without a loop.
func TestFeedBacklogStaysInTheFeed(t *testing.T) {
	ds := dstest.Client(t)
	ctx := context.Background()
	for _, r := range []api.Resource{
		pool("p", "10.244.0.0/16", "Never", false),
		node("node-a", "192.0.2.1/24", ""),
		node("node-b", "192.0.2.2/24", ""),
		node("node-c", "192.0.2.3/24", ""),
		node("node-d", "192.0.2.4/24", ""),
	} {
		if _, err := ds.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	ic := ipam.New(ds)
	block := func(node string) string {
		t.Helper()
		ips, err := ic.AutoAssign(ctx, ipam.AssignArgs{Node: node, HandleID: "pod-" + node})
		if err != nil || len(ips) != 1 {
			t.Fatalf("assigning an address to %s: %v %v", node, ips, err)
		}
		b, _ := ips[0].Prefix(26)
		return b.String()
	}
	blockB := block("node-b")

	n := nstest.New(t)
	n.Veth(t, "eth0", "eth0peer")
	n.AddAddr(t, "eth0", "192.0.2.1/24")
	f, fd := feedFelix(t, ds, n)
	fctx, stopFeed := context.WithCancel(ctx)
	fdone := make(chan struct{})
	go func() { _ = fd.Run(fctx); close(fdone) }()
	run := func() func() {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- f.Run(rctx) }()
		return func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v", err)
			}
		}
	}
	// Stop felix's Runs before the feed: a batch left waiting for a loop
	// that never comes back only keeps the feed's delivery goroutine.
	stopRun := func() {}
	t.Cleanup(func() { stopRun(); stopFeed(); <-fdone })

	waiting := func(want bool, when string) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			name, _ := fd.Stalled(time.Now(), 0)
			if want && name != "felix" {
				return when + ": no batch waits for felix's loop (stalled: " + name + ")"
			}
			if !want && name != "" {
				return when + ": a batch still waits for " + name
			}
			return ""
		})
	}
	eth0 := func() int {
		l, err := n.Handle.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		return l.Attrs().Index
	}()
	routeVia := func(block, gw string) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			r, ok := n.Routes(t)[pfx(block)]
			if !ok || r.Gw.String() != gw || r.LinkIndex != eth0 {
				return "no route " + block + " via " + gw + " dev eth0"
			}
			return ""
		})
	}

	// No Run yet: the first snapshot waits in the feed.
	waiting(true, "before Run")
	stopRun = run()
	waiting(false, "with Run")
	routeVia(blockB, "192.0.2.2")

	// A wedged loop: the next change waits in the feed, felix is named.
	release := f.WedgeLoop()
	blockC := block("node-c")
	waiting(true, "while the loop is wedged")
	release()
	waiting(false, "after the loop came back")
	routeVia(blockC, "192.0.2.3")

	// Run returns: changes wait again; the input methods still only queue.
	stopRun()
	stopRun = func() {}
	block("node-d")
	waiting(true, "after Run returned")
	f.SetResource(node("node-e", "192.0.2.5/24", ""))
	f.RouteUpdate(pfx("10.99.0.0/24"), addr("192.0.2.2"), addr("192.0.2.2"), 0)
	f.DeleteResource(api.KindNode, "node-e")
	stopRun = run()
	waiting(false, "after Run started again")
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := f.LocalEndpoints(lctx); err != nil {
		t.Fatalf("the restarted loop does not answer: %v", err)
	}
}

// feedFelix is node-a's felix in n, without policy, and a node feed of
// ds with felix subscribed ("felix"); neither runs yet.
func feedFelix(t *testing.T, ds *datastore.Client, n *nstest.NS) (*felix.Felix, *feed.Feed) {
	t.Helper()
	f, err := felix.New(felix.Config{
		Features: felix.Features{DisablePolicy: true}, NodeName: "node-a", NetNSPath: n.Path(),
		ResyncInterval: time.Minute, MTUFile: filepath.Join(t.TempDir(), "mtu"),
	})
	if err != nil {
		t.Fatal(err)
	}
	fd := feed.New(ds, feed.Options{})
	fc := f.Consumer()
	fd.Subscribe("felix", fc.SubscribedKinds(), fc, fc.Options()...)
	return f, fd
}

// TestFeedStopsWithBatchForStoppedFelix: the daemon's shutdown reaches
// felix's Run before the node feed, and a change arrives for felix in
// between, so the feed's delivery goroutine waits in felix's consumer
// for a loop that is gone. The feed's Run still returns once its own
// context ends (it used to wait for that goroutine forever, and the
// daemon's shutdown for its whole --shutdown-timeout).
func TestFeedStopsWithBatchForStoppedFelix(t *testing.T) {
	ds := dstest.Client(t)
	ctx := context.Background()
	for _, r := range []api.Resource{pool("p", "10.244.0.0/16", "Never", false), node("node-a", "192.0.2.1/24", "")} {
		if _, err := ds.Apply(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	f, fd := feedFelix(t, ds, nstest.New(t))
	fctx, stopFeed := context.WithCancel(ctx)
	defer stopFeed()
	fdone := make(chan error, 1)
	go func() { fdone <- fd.Run(fctx) }()
	rctx, stopRun := context.WithCancel(ctx)
	rdone := make(chan error, 1)
	go func() { rdone <- f.Run(rctx) }()

	// The snapshot is taken: nothing waits.
	nstest.Eventually(t, 20*time.Second, func() string {
		if !fd.Synced() {
			return "the feed has no snapshot"
		}
		if name, _ := fd.Stalled(time.Now(), 0); name != "" {
			return "the snapshot waits for " + name
		}
		return ""
	})
	stopRun()
	if err := <-rdone; !errors.Is(err, context.Canceled) {
		t.Fatalf("felix's Run returned %v", err)
	}
	if _, err := ds.Apply(ctx, node("node-b", "192.0.2.2/24", "")); err != nil {
		t.Fatal(err)
	}
	nstest.Eventually(t, 20*time.Second, func() string {
		if name, _ := fd.Stalled(time.Now(), 0); name != "felix" {
			return "the change does not wait in felix's consumer (stalled: " + name + ")"
		}
		return ""
	})
	stopFeed()
	select {
	case err := <-fdone:
		if err != nil {
			t.Errorf("the feed's Run returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the feed's Run did not return 5 s after its context ended: its delivery goroutine waits in felix's OnBatch")
	}
}
