package feed_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
)

// ipamRecorder keeps what felix would hear of IPAM from the feed.
type ipamRecorder struct {
	mu        sync.Mutex
	affSnaps  [][]ipam.Affinity
	affEvents []string
	borrowed  map[netip.Prefix]map[netip.Addr]string
	brCalls   int
}

func (r *ipamRecorder) OnAffinitySnapshot(all []ipam.Affinity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.affSnaps = append(r.affSnaps, all)
}

func (r *ipamRecorder) OnAffinityUpdate(a ipam.Affinity, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if deleted {
		r.affEvents = append(r.affEvents, fmt.Sprintf("%s %s deleted", a.Node, a.CIDR))
		return
	}
	r.affEvents = append(r.affEvents, fmt.Sprintf("%s %s %s", a.Node, a.CIDR, a.State))
}

func (r *ipamRecorder) OnBorrowedSnapshot(all map[netip.Prefix]map[netip.Addr]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.borrowed, r.brCalls = all, r.brCalls+1
}

func (r *ipamRecorder) OnBorrowedBlock(b netip.Prefix, br map[netip.Addr]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(br) == 0 {
		delete(r.borrowed, b)
	} else {
		r.borrowed[b] = br
	}
	r.brCalls++
}

func (r *ipamRecorder) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() string {
		r.mu.Lock()
		defer r.mu.Unlock()
		if cond() {
			return ""
		}
		return fmt.Sprintf("waiting for %s; affinity snapshots %v events %v borrowed %v", what, r.affSnaps, r.affEvents, r.borrowed)
	})
}

func startFeed(t *testing.T, ds *datastore.Client, opt feed.Options, subs ...func(*feed.Feed)) *feed.Feed {
	t.Helper()
	fd := feed.New(ds, opt)
	for _, s := range subs {
		s(fd)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fd.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v after cancel, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return fd
}

func pool(t *testing.T, ds *datastore.Client, name, cidr string, blockSize int) {
	dstest.Apply(t, ds, fmt.Sprintf("apiVersion: routed.io/v1\nkind: IPPool\nmetadata: {name: %s}\nspec: {cidr: %s, blockSize: %d}\n", name, cidr, blockSize))
}

func assign(t *testing.T, c *ipam.Client, node, handle string) netip.Addr {
	t.Helper()
	ips, err := c.AutoAssign(context.Background(), ipam.AssignArgs{Node: node, HandleID: handle, Attrs: ipam.Attributes{Namespace: "default", Pod: handle}})
	if err != nil || len(ips) != 1 {
		t.Fatalf("AutoAssign(%s, %s) = %v, %v", node, handle, ips, err)
	}
	return ips[0]
}

// TestAffinities: a snapshot of the existing claims, then every state of
// a claim and its release, in order.
func TestAffinities(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	pool(t, ds, "p", "10.13.0.0/24", 26)
	c := ipam.New(ds, ipam.WithEmptyBlockGrace(0))
	first := assign(t, c, "n0", "before-watch")
	firstBlock := netip.PrefixFrom(first, 26).Masked()

	rec := &ipamRecorder{}
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("rec", []api.Kind{feed.KindAffinity}, feed.Dispatch{Affinities: rec})
	})
	rec.wait(t, "snapshot", func() bool { return len(rec.affSnaps) == 1 })
	if s := rec.affSnaps[0]; len(s) != 1 || s[0] != (ipam.Affinity{Node: "n0", CIDR: firstBlock, State: ipam.StateConfirmed}) {
		t.Fatalf("snapshot %v", s)
	}
	ip := assign(t, c, "n1", "h1")
	block := netip.PrefixFrom(ip, 26).Masked()
	want := []string{fmt.Sprintf("n1 %s pending", block), fmt.Sprintf("n1 %s confirmed", block)}
	rec.wait(t, "claim events", func() bool { return len(rec.affEvents) >= 2 })
	if fmt.Sprint(rec.affEvents) != fmt.Sprint(want) {
		t.Fatalf("claim events %v, want %v", rec.affEvents, want)
	}
	ctx := context.Background()
	if _, err := c.ReleaseByHandle(ctx, "h1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseEmptyBlocks(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprintf("n1 %s pendingDeletion", block), fmt.Sprintf("n1 %s deleted", block))
	rec.wait(t, "release events", func() bool { return len(rec.affEvents) >= 4 })
	if fmt.Sprint(rec.affEvents) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", rec.affEvents, want)
	}
}

// TestBorrowed: every block's borrowed addresses, reported only when they
// change (most block writes change none).
func TestBorrowed(t *testing.T) {
	t.Parallel()
	ds := dstest.Client(t)
	pool(t, ds, "one-block", "10.6.0.0/28", 28)
	c := ipam.New(ds)
	assign(t, c, "n1", "n1-pod")
	borrowed := assign(t, c, "n2", "n2-pod") // from n1's block
	rec := &ipamRecorder{}
	startFeed(t, ds, feed.Options{}, func(fd *feed.Feed) {
		fd.Subscribe("rec", []api.Kind{feed.KindBorrowed}, feed.Dispatch{Borrowed: rec})
	})
	state := func(want string) func() bool { return func() bool { return fmt.Sprint(rec.borrowed) == want } }
	rec.wait(t, "the snapshot", state(fmt.Sprintf("map[10.6.0.0/28:map[%s:n2]]", borrowed)))
	second := assign(t, c, "n3", "n3-pod")
	rec.wait(t, "the second borrowed address", state(fmt.Sprintf("map[10.6.0.0/28:map[%s:n2 %s:n3]]", borrowed, second)))
	rec.mu.Lock()
	before := rec.brCalls
	rec.mu.Unlock()
	assign(t, c, "n1", "n1-pod2") // the block's own node: nothing borrowed changes
	if _, err := c.ReleaseByHandle(context.Background(), "n3-pod"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "n3's release", state(fmt.Sprintf("map[10.6.0.0/28:map[%s:n2]]", borrowed)))
	rec.mu.Lock()
	if rec.brCalls != before+1 {
		t.Errorf("%d reports for one borrowed change and one unrelated write, want 1", rec.brCalls-before)
	}
	rec.mu.Unlock()
	if _, err := c.ReleaseByHandle(context.Background(), "n2-pod"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "nothing borrowed", state("map[]"))
}
