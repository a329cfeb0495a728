package ipam

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

func TestEmptyBlockReleasedAfterGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.10.0.0/24", 26)
	clk := newClock()
	c := New(e.ds, WithEmptyBlockGrace(5*time.Minute))
	c.now = clk.now
	ctx := ctxT(t)

	ip := assign(t, c, "n1", "a")
	assign(t, c, "n1", "b")
	if _, err := c.ReleaseByHandle(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Hour)
	if got, err := c.ReleaseEmptyBlocks(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("released a block still in use: %v %v", got, err)
	}
	if _, err := c.ReleaseByHandle(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	clk.advance(4 * time.Minute)
	if got, err := c.ReleaseEmptyBlocks(ctx, "n1"); err != nil || len(got) != 0 {
		t.Fatalf("released before the grace period: %v %v", got, err)
	}
	clk.advance(2 * time.Minute)
	if got, err := c.ReleaseEmptyBlocks(ctx, "other-node"); err != nil || len(got) != 0 {
		t.Fatalf("node filter ignored: %v %v", got, err)
	}
	got, err := c.ReleaseEmptyBlocks(ctx, "n1")
	if err != nil || len(got) != 1 || !got[0].Contains(ip) {
		t.Fatalf("ReleaseEmptyBlocks = %v, %v; want the block of %s", got, err, ip)
	}
	if blocks, _ := c.BlocksForNode(ctx, "n1"); len(blocks) != 0 {
		t.Fatalf("n1 still has %+v", blocks)
	}
	if left := ipamKeysLeft(t, e.ds); len(left) != 0 {
		t.Fatalf("IPAM keys left after releasing everything: %v", left)
	}
	// The client's cache must not hand out the deleted block.
	if ip := assign(t, c, "n1", "c"); !pfx("10.10.0.0/24").Contains(ip) {
		t.Fatal("allocation after release failed")
	}
	mustVerify(t, c)
}

func TestPendingDeletionRevertedWhenBlockInUse(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.11.0.0/24", 26, WithEmptyBlockGrace(0))
	ctx := ctxT(t)
	ip := assign(t, c, "n1", "a")
	block := netip.PrefixFrom(ip, 26).Masked()
	// A releaser that crashed after marking the affinity (or lost to this
	// allocation) leaves pendingDeletion behind.
	if _, err := e.ds.Etcd().Put(ctx, affinityKey("n1", block), string(encodeAffinity(StatePendingDeletion, time.Now()))); err != nil {
		t.Fatal(err)
	}
	if got, err := c.ReleaseEmptyBlocks(ctx, ""); err != nil || len(got) != 0 {
		t.Fatalf("released a block in use: %v %v", got, err)
	}
	blocks, _ := c.BlocksForNode(ctx, "n1")
	if len(blocks) != 1 || blocks[0].State != StateConfirmed {
		t.Fatalf("affinity not handed back: %+v", blocks)
	}
	// With the block empty the same leftover is finished instead.
	if _, err := c.ReleaseByHandle(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ds.Etcd().Put(ctx, affinityKey("n1", block), string(encodeAffinity(StatePendingDeletion, time.Now()))); err != nil {
		t.Fatal(err)
	}
	if got, err := New(e.ds, WithEmptyBlockGrace(time.Hour)).ReleaseEmptyBlocks(ctx, ""); err != nil || len(got) != 1 {
		t.Fatalf("pendingDeletion leftover not finished: %v %v", got, err)
	}
	mustVerify(t, c)
}

func TestCheckAndGC(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.12.0.0/24", 26)
	e.node("n1", nil)
	e.node("n2", nil)
	clk := newClock()
	c := New(e.ds)
	c.now = clk.now
	ctx := ctxT(t)

	live := assign(t, c, "n1", "net.live")
	e.wep("n1", "live", "net.live", live)
	leaked := assign(t, c, "n1", "net.leaked")
	tunnel, err := c.AutoAssign(ctx, AssignArgs{Node: "n2", HandleID: TunnelHandle("n2"), Attrs: Attributes{Type: TypeTunnel}})
	if err != nil {
		t.Fatal(err)
	}
	n2pod := assign(t, c, "n2", "net.n2pod")
	n2wep := e.wep("n2", "n2pod", "net.n2pod", n2pod)
	e.deleteNode("n2")

	r, err := c.Check(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Leaks) != 0 || r.YoungLeaks != 2 || len(r.DeadNodeBlocks) != 1 || r.DeadNodeBlocks[0].Node != "n2" {
		t.Fatalf("young check: %+v", r)
	}

	clk.advance(11 * time.Minute)
	// Hand-made debris: an affinity without a block, a handle without
	// addresses, and a handle record that disagrees with its block.
	debrisAff := affinityKey("n1", pfx("10.99.0.0/26"))
	mustPut(t, e, debrisAff, string(encodeAffinity(StateConfirmed, clk.now())))
	mustPut(t, e, handleKey("ghost"), `{"id":"ghost","blocks":{}}`)
	liveBlock := netip.PrefixFrom(live, 26).Masked().String()
	mustPut(t, e, handleKey("net.live"), `{"id":"net.live","blocks":{"`+liveBlock+`":[1,2,3]}}`)

	r, err = c.Check(ctx, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	leakIPs := leakAddrs(r)
	if !slices.Equal(leakIPs, sorted(leaked, tunnel[0])) {
		t.Fatalf("leaks %v, want %v and %v", leakIPs, leaked, tunnel[0])
	}
	if len(r.DanglingAffinities) != 1 || len(r.EmptyHandles) != 1 || r.EmptyHandles[0] != "ghost" || len(r.Inconsistencies) != 1 {
		t.Fatalf("check: dangling %v empty %v inconsistent %v", r.DanglingAffinities, r.EmptyHandles, r.Inconsistencies)
	}
	if r.Problems() != 6 {
		t.Fatalf("Problems() = %d, want 6", r.Problems())
	}

	r, err = c.GC(ctx, 10*time.Minute)
	if err != nil || len(r.Errors) > 0 {
		t.Fatalf("GC: %v %v", err, r.Errors)
	}
	if !slices.Equal(r.Released, sorted(leaked, tunnel[0])) || len(r.RemovedAffinities) != 1 || len(r.RemovedHandles) != 1 || len(r.Repaired) != 1 {
		t.Fatalf("GC did %+v", r)
	}
	// n2's block stays while its pod lives on.
	if len(r.RemovedBlocks) != 0 {
		t.Fatalf("removed %v while it still holds %s", r.RemovedBlocks, n2pod)
	}
	if _, err := c.IPInfo(ctx, live); err != nil {
		t.Fatalf("GC freed the live pod's address: %v", err)
	}
	mustVerify(t, c)

	// Once the pod is gone too, its address and the dead node's block go.
	if err := e.ds.Delete(ctx, api.KindWorkloadEndpoint, n2wep, ""); err != nil {
		t.Fatal(err)
	}
	r, err = c.GC(ctx, 10*time.Minute)
	if err != nil || len(r.Errors) > 0 {
		t.Fatalf("GC: %v %v", err, r.Errors)
	}
	if len(r.Released) != 1 || r.Released[0] != n2pod || len(r.RemovedBlocks) != 1 || !r.RemovedBlocks[0].Contains(n2pod) {
		t.Fatalf("second GC did %+v", r)
	}
	r, _ = c.Check(ctx, 0)
	if r.Problems() != 0 {
		t.Fatalf("problems left after GC: %+v", r)
	}
	mustVerify(t, c)
}

func leakAddrs(r *Report) []netip.Addr {
	var out []netip.Addr
	for _, l := range r.Leaks {
		if l.Reason == "" {
			continue // every leak must say why
		}
		out = append(out, l.IP)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func sorted(ips ...netip.Addr) []netip.Addr {
	out := slices.Clone(ips)
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

func mustPut(t *testing.T, e *env, key, val string) {
	t.Helper()
	if _, err := e.ds.Etcd().Put(context.Background(), key, val); err != nil {
		t.Fatal(err)
	}
}

// TestGCKeepsWhatUnreadableEndpointsHold: an endpoint record that does
// not decode still names what it holds when its handle or its address
// can be read, and GC leaves those alone; one of which nothing can be
// read could name any address, and GC frees no pod address while it is
// there (Check still lists the leaks, and says why).
func TestGCKeepsWhatUnreadableEndpointsHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.13.0.0/24", 26)
	e.node("n1", nil)
	clk := newClock()
	c := New(e.ds)
	c.now = clk.now
	ctx := ctxT(t)
	wepKey := func(name string) string { return datastore.Key(api.KindWorkloadEndpoint, "default."+name) }

	byHandle := assign(t, c, "n1", "net.by-handle")
	byAddr := assign(t, c, "n1", "net.by-addr")
	leaked := assign(t, c, "n1", "net.leaked")
	// Ports not a list: neither decodes. One's addresses are not a
	// list either (its handle is read), the other's handle is a number
	// (its address is read).
	mustPut(t, e, wepKey("a"), `{"kind":"WorkloadEndpoint","metadata":{"name":"a","namespace":"default"},"spec":{"node":"n1","handle":"net.by-handle","ipNetworks":"`+byHandle.String()+`/32","ports":7}}`)
	mustPut(t, e, wepKey("b"), `{"kind":"WorkloadEndpoint","metadata":{"name":"b","namespace":"default"},"spec":{"node":"n1","handle":7,"ipNetworks":["`+byAddr.String()+`/32"],"ports":7}}`)
	clk.advance(11 * time.Minute)
	r, err := c.GC(ctx, 10*time.Minute)
	if err != nil || len(r.Errors) > 0 {
		t.Fatalf("GC: %v %v", err, r.Errors)
	}
	if !slices.Equal(r.Released, []netip.Addr{leaked}) || r.Held != "" {
		t.Fatalf("GC released %v (held: %q), want %s alone: the unreadable records name the others", r.Released, r.Held, leaked)
	}

	// A record nothing can be read from: no pod address is freed.
	blindLeak := assign(t, c, "n1", "net.blind-leak")
	mustPut(t, e, wepKey("c"), `{not json`)
	clk.advance(11 * time.Minute)
	r, err = c.GC(ctx, 10*time.Minute)
	if err != nil || len(r.Errors) > 0 {
		t.Fatalf("GC: %v %v", err, r.Errors)
	}
	if len(r.Released) != 0 || !strings.Contains(r.Held, "1 workload endpoint record(s) do not decode") || !slices.Equal(leakAddrs(r), []netip.Addr{blindLeak}) {
		t.Fatalf("GC with an endpoint record nothing can be read from: released %v, held %q, leaks %v; want nothing released, the reason, %s listed", r.Released, r.Held, leakAddrs(r), blindLeak)
	}
	if _, err := c.IPInfo(ctx, blindLeak); err != nil {
		t.Fatalf("%s was freed: %v", blindLeak, err)
	}
	if _, err := e.ds.Etcd().Delete(ctx, wepKey("c")); err != nil {
		t.Fatal(err)
	}
	r, err = c.GC(ctx, 10*time.Minute)
	if err != nil || len(r.Errors) > 0 || !slices.Equal(r.Released, []netip.Addr{blindLeak}) || r.Held != "" {
		t.Fatalf("GC once the record is deleted: %v %+v, want %s released", err, r, blindLeak)
	}
}
