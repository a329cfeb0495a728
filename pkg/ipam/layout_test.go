package ipam

import (
	"context"
	"errors"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
)

// toOldLayout stores every block as a routed before layout 2 did: whole,
// under summaryPrefix, nothing under blockPrefix, no layout marker. The
// block values are what they are (the block format did not change).
func toOldLayout(t testing.TB, e *env) {
	t.Helper()
	ctx := context.Background()
	resp, err := e.ds.Etcd().Get(ctx, blockPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if _, err := e.ds.Etcd().Txn(ctx).Then(clientv3.OpPut(summaryKeyOf(string(kv.Key)), string(kv.Value)), clientv3.OpDelete(string(kv.Key))).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ds.Etcd().Delete(ctx, layoutKey); err != nil {
		t.Fatal(err)
	}
}

// checkMoved checks that every block is in layout 2: whole under
// blockPrefix, and under summaryPrefix a summary that says what the
// whole block says, as the node feed reads each (DecodeBlock: its
// path for a whole block is the one routed used before layout 2).
func checkMoved(t testing.TB, e *env, blocks int) {
	t.Helper()
	ctx := context.Background()
	if resp, err := e.ds.Etcd().Get(ctx, layoutKey); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "2" {
		t.Fatalf("layout marker: %v %v", resp, err)
	}
	resp, err := e.ds.Etcd().Get(ctx, blockPrefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != blocks {
		t.Fatalf("whole blocks: %d, %v; want %d", len(resp.Kvs), err, blocks)
	}
	for _, kv := range resp.Kvs {
		skey := summaryKeyOf(string(kv.Key))
		sr, err := e.ds.Etcd().Get(ctx, skey)
		if err != nil || len(sr.Kvs) != 1 || !isSummary(sr.Kvs[0].Value) {
			t.Fatalf("%s: %v %v; want a summary", skey, sr, err)
		}
		if _, err := decodeBlock(sr.Kvs[0].Value); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a routed before layout 2 decodes the summary %s as a block: %v; want ErrCorrupt", sr.Kvs[0].Value, err)
		}
		wp, wbr, wt, err := DecodeBlock(skey, kv.Value, false) // the whole block, read as before layout 2
		if err != nil {
			t.Fatal(err)
		}
		p, br, tally, err := DecodeBlock(skey, sr.Kvs[0].Value, false)
		if err != nil || p != wp || !maps.Equal(br, wbr) || tally != wt {
			t.Fatalf("summary of %s says %v %v %+v (%v); the block says %v %v %+v", wp, p, br, tally, err, wp, wbr, wt)
		}
	}
}

// TestLayoutMovesOldBlocks: a datastore written before layout 2 (whole
// blocks where the nodes watch) is moved by the first Client that
// touches IPAM: each block whole outside the watched prefix, a summary
// in its place that the feed reads as it read the block (borrowed
// addresses and tallies), and that an older routed refuses instead of
// taking for an empty block. Allocation goes on in the node's own block
// (not a new one); several Clients moving at once agree; a block an
// older routed stores whole afterwards (during the upgrade) is reported
// by Check and moved by GC; a claim never overwrites such a block.
func TestLayoutMovesOldBlocks(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.0.0/26", 28)
	ctx := ctxT(t)
	a1 := assign(t, c, "n1", "n1-a")
	assign(t, c, "n1", "n1-b")
	n2a := assign(t, c, "n2", "n2-a")
	// n2 holds an address in n1's block: borrowed.
	lent := a1.Next().Next().Next()
	if err := c.AssignIP(ctx, lent, "n2-lent", "n2", Attributes{}); err != nil {
		t.Fatal(err)
	}
	mustVerify(t, c)
	toOldLayout(t, e)

	c2 := New(e.ds)
	got := assign(t, c2, "n1", "n1-c")
	if own := netip.PrefixFrom(a1, 28).Masked(); !own.Contains(got) {
		t.Fatalf("n1's new address %s is not in its block %s", got, own)
	}
	checkMoved(t, e, 2)
	mustVerify(t, c2)
	if info, err := c2.IPInfo(ctx, lent); err != nil || !info.Borrowed() || info.Node != "n2" {
		t.Fatalf("the lent address after the move: %+v %v", info, err)
	}

	// Back to the old layout; four Clients at once.
	toOldLayout(t, e)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() {
			ci := New(e.ds)
			if i%2 == 0 {
				// A read moves nothing: it reads after the move, or fails
				// saying why.
				if _, err := ci.Usage(ctx); err != nil && !errors.Is(err, ErrOldLayout) {
					errs <- err
				}
				return
			}
			_, err := ci.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "n1-x" + string(rune('0'+i))})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("moving with others at once: %v", err)
		}
	}
	checkMoved(t, e, 2)
	mustVerify(t, c2)

	// An older routed claims a block after the move: whole, under the
	// summary's key, with its affinity.
	used := map[netip.Prefix]bool{netip.PrefixFrom(a1, 28).Masked(): true, netip.PrefixFrom(n2a, 28).Masked(): true}
	var free []netip.Prefix
	for _, b := range []string{"10.9.0.0/28", "10.9.0.16/28", "10.9.0.32/28", "10.9.0.48/28"} {
		if !used[pfx(b)] {
			free = append(free, pfx(b))
		}
	}
	e.node("n3", nil) // a node that exists: GC keeps its empty blocks
	stray := func(p netip.Prefix) string {
		b := newBlock(p, "n3", 1, time.Now())
		if _, err := e.ds.Etcd().Txn(ctx).Then(clientv3.OpPut(summaryKeyOf(blockKey(p)), string(b.encode())),
			clientv3.OpPut(affinityKey("n3", p), string(encodeAffinity(StateConfirmed, time.Now())))).Commit(); err != nil {
			t.Fatal(err)
		}
		return string(b.encode())
	}
	// An address asked for in such a block: the block moves (it is
	// n3's, not overwritten by a claim) and the address is n4's there.
	strayVal := stray(free[0])
	in := free[0].Addr().Next()
	if err := c2.AssignIP(ctx, in, "n4-x", "n4", Attributes{}); err != nil {
		t.Fatal(err)
	}
	if info, err := c2.IPInfo(ctx, in); err != nil || info.BlockNode != "n3" || info.Node != "n4" {
		t.Fatalf("%s after AssignIP: %+v %v; want n4's in n3's block", in, info, err)
	}
	if resp, err := e.ds.Etcd().Get(ctx, blockKey(free[0])); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the moved block: %v %v", resp, err)
	} else if b, err := decodeBlock(resp.Kvs[0].Value); err != nil || b.owner() != "n3" || b.SequenceNumber != 2 {
		t.Fatalf("the older routed's block %s moved as %+v (%v); want it with one allocation more", strayVal, b, err)
	}
	checkMoved(t, e, 3)
	// Another: Check reports it, GC moves it.
	stray(free[1])
	r, err := c2.Check(ctx, time.Hour)
	if err != nil || !strings.Contains(strings.Join(r.Inconsistencies, "\n"), "layout before 2") {
		t.Fatalf("Check: %v; inconsistencies %q; want the block stored whole reported", err, r.Inconsistencies)
	}
	if r, err := c2.GC(ctx, time.Hour); err != nil || len(r.Errors) > 0 {
		t.Fatalf("GC: %v %q", err, r.Errors)
	}
	checkMoved(t, e, 4)
	mustVerify(t, c2)
}

// TestLayoutSummaryChecks: the feed refuses a summary whose cidr is not
// its key's, whose borrowed addresses lie outside its block or name the
// block's own node, or whose counts do not add up: it would route
// addresses by it.
func TestLayoutSummaryChecks(t *testing.T) {
	key := summaryPrefix + "10.9.0.0-28"
	for _, v := range []string{
		`{"cidr":"10.9.0.16/28","affinity":"host:n1","inUse":1,"layout":2}`,
		`{"cidr":"10.9.0.0/28","affinity":"host:n1","inUse":1,"others":1,"borrowed":{"10.9.0.20":"n2"},"layout":2}`,
		`{"cidr":"10.9.0.0/28","affinity":"host:n1","inUse":1,"others":1,"borrowed":{"10.9.0.2":"n1"},"layout":2}`,
		`{"cidr":"10.9.0.0/28","affinity":"host:n1","inUse":1,"others":0,"borrowed":{"10.9.0.2":"n2"},"layout":2}`,
		`{"cidr":"10.9.0.0/28","affinity":"host:n1","inUse":17,"layout":2}`,
	} {
		if _, _, _, err := DecodeBlock(key, []byte(v), false); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v; want ErrCorrupt", v, err)
		}
	}
	p, br, tally, err := DecodeBlock(key, []byte(`{"cidr":"10.9.0.0/28","affinity":"host:n1","inUse":3,"others":1,"borrowed":{"10.9.0.2":"n2"},"layout":2}`), false)
	if err != nil || p != pfx("10.9.0.0/28") || len(br) != 1 || br[mustParse("10.9.0.2")] != "n2" || tally != (BlockTally{Node: "n1", InUse: 3, Borrowed: 1}) {
		t.Fatalf("a good summary: %v %v %+v %v", p, br, tally, err)
	}
}

// TestLayoutReadOnlyAndRestore: an operator's read-only operations
// (ReadOnly: routedctl ipam show and check) and dry runs of a datastore
// in the old layout fail with ErrOldLayout and change nothing (they must
// not move it under older nodes); any other operation moves it, a read
// included (a node's re-import, a CNI DEL). A datastore restored from
// before the move is moved again by a Client that saw the move, at its
// next operation, whatever it is. A node's own block that an older
// routed stored whole, and a pool holding one, are moved when met: the
// node allocates in it at once, the pool is not deleted from under it.
func TestLayoutReadOnlyAndRestore(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.0.0/26", 28)
	ctx := ctxT(t)
	first := assign(t, c, "n1", "n1-a")
	toOldLayout(t, e)
	r := New(e.ds)
	ro := ReadOnly(ctx)
	if _, err := r.Usage(ro); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("Usage: %v; want ErrOldLayout", err)
	}
	if _, err := r.IPInfo(ro, first); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("IPInfo: %v; want ErrOldLayout", err)
	}
	if _, err := r.Check(ro, time.Hour); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("Check: %v; want ErrOldLayout", err)
	}
	if _, err := r.Import(ro, []ImportBlock{{CIDR: pfx("10.9.0.48/28"), Node: "n9"}}, true); !errors.Is(err, ErrOldLayout) {
		t.Fatalf("an operator's dry-run Import: %v; want ErrOldLayout", err)
	}
	// The pinned revision of a read made before the move (node GC's).
	pinned, err := e.ds.Etcd().Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.BlockOwners(ctx, pinned.Header.Revision); !errors.Is(err, datastore.ErrConflict) {
		t.Fatalf("BlockOwners at a revision before the move: %v; want a conflict (it would read an empty prefix)", err)
	}
	toOldLayout(t, e)
	if resp, err := e.ds.Etcd().Get(ctx, blockPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("read-only operations moved blocks: %v %v", resp, err)
	}
	// A node's read (its re-import asks who holds an address) moves.
	if info, err := r.IPInfo(ctx, first); err != nil || info.Node != "n1" {
		t.Fatalf("IPInfo that may move: %+v %v", info, err)
	}
	checkMoved(t, e, 1)
	toOldLayout(t, e)
	got := assign(t, r, "n1", "n1-b") // a write: moves
	if own := netip.PrefixFrom(first, 28).Masked(); !own.Contains(got) {
		t.Fatalf("n1's address %s is not in its block %s", got, own)
	}
	checkMoved(t, e, 1)

	// Restored from before the move, under the same Client: its next
	// operation, a read or a write, moves it again.
	toOldLayout(t, e)
	if info, err := r.IPInfo(ctx, first); err != nil || info.Node != "n1" {
		t.Fatalf("after the restore, IPInfo: %+v %v; want n1's", info, err)
	}
	checkMoved(t, e, 1)
	toOldLayout(t, e)
	got = assign(t, r, "n1", "n1-c")
	if own := netip.PrefixFrom(first, 28).Masked(); !own.Contains(got) {
		t.Fatalf("after the restore: n1's address %s is not in its block %s", got, own)
	}
	checkMoved(t, e, 1)

	// n3's block, stored whole by n3's older routed after the move,
	// with n3's confirmed affinity; n3 upgraded allocates in it.
	e.node("n3", nil)
	var stray netip.Prefix
	for _, b := range []string{"10.9.0.0/28", "10.9.0.16/28", "10.9.0.32/28", "10.9.0.48/28"} {
		if !pfx(b).Contains(first) {
			stray = pfx(b)
			break
		}
	}
	old := newBlock(stray, "n3", 1, time.Now())
	if _, err := e.ds.Etcd().Txn(ctx).Then(clientv3.OpPut(summaryKeyOf(blockKey(stray)), string(old.encode())),
		clientv3.OpPut(affinityKey("n3", stray), string(encodeAffinity(StateConfirmed, time.Now())))).Commit(); err != nil {
		t.Fatal(err)
	}
	before := r.Stats()
	if err := r.AssignIP(ctx, stray.Addr().Next(), "n3-a", "n3", Attributes{}); err != nil {
		t.Fatal(err)
	}
	if n := r.Stats().Txns - before.Txns; n > 20 {
		t.Fatalf("AssignIP in n3's block stored whole took %d transactions", n)
	}
	checkMoved(t, e, 2)
	mustVerify(t, r)

	// A pool holding such a block is not deleted without force.
	toOldLayout(t, e)
	if err := New(e.ds).DeletePool(ctx, "p", false); !errors.Is(err, ErrPoolInUse) {
		t.Fatalf("DeletePool over blocks stored whole: %v; want ErrPoolInUse", err)
	}
}

// TestLayoutBadRecords: records under the summaries' prefix that cannot
// be moved (not a block; a block stored both ways) do not stop IPAM:
// GC goes on (Check reports them), a pool is deleted with force at
// once, and a read pinned to a revision in the middle of a move fails
// with a conflict rather than missing the blocks not yet moved.
func TestLayoutBadRecords(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.0.0/26", 28)
	ctx := ctxT(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		e.node(n, nil)
		assign(t, c, n, n+"-a")
	}
	toOldLayout(t, e)
	resp, err := e.ds.Etcd().Get(ctx, summaryPrefix, clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 3 {
		t.Fatalf("old layout: %v %v", resp, err)
	}
	if moved, err := c.moveBlock(ctx, resp.Kvs[0]); err != nil || !moved {
		t.Fatalf("moving one block: %v %v", moved, err)
	}
	mid, err := e.ds.Etcd().Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if owners, err := New(e.ds).BlockOwners(ctx, mid.Header.Revision); !errors.Is(err, datastore.ErrConflict) {
		t.Fatalf("BlockOwners pinned in the middle of the move: %v, %v; want a conflict", owners, err)
	}
	checkMoved(t, e, 3)

	// Garbage where a free block's summary goes, and a block stored
	// both ways.
	var free netip.Prefix
	for _, b := range []string{"10.9.0.0/28", "10.9.0.16/28", "10.9.0.32/28", "10.9.0.48/28"} {
		if r, _ := e.ds.Etcd().Get(ctx, blockKey(pfx(b))); len(r.Kvs) == 0 {
			free = pfx(b)
		}
	}
	if _, err := e.ds.Etcd().Put(ctx, summaryKeyOf(blockKey(free)), "garbage"); err != nil {
		t.Fatal(err)
	}
	both := resp.Kvs[1]
	if _, err := e.ds.Etcd().Put(ctx, string(both.Key), string(both.Value)); err != nil {
		t.Fatal(err)
	}
	if r, err := c.GC(ctx, time.Hour); err != nil {
		t.Fatalf("GC with records it cannot move: %v (%q)", err, r.Errors)
	}
	if r, err := c.Check(ctx, time.Hour); err != nil || len(r.Inconsistencies) == 0 {
		t.Fatalf("Check: %v, %q; want the records reported", err, r.Inconsistencies)
	}
	t0 := time.Now()
	if err := c.DeletePool(ctx, "p", true); err != nil {
		t.Fatalf("DeletePool --force: %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("DeletePool took %v", d)
	}
}

// TestLayoutOrphanSummary: a block's summary stored without the block
// (a hand edit or a partial restore; routed writes both in one
// transaction) makes that cidr unusable, not the pool: a claim of any
// block moves on to another without leaving a pending affinity behind,
// and a request for an address in it names the record.
func TestLayoutOrphanSummary(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.0.0/24", 28)
	ctx := ctxT(t)
	e.node("n1", nil)
	e.node("n2", nil)
	// A summary as routed writes one, for a block of n2's that is
	// then taken away, at 15 of the pool's 16 blocks.
	free := pfx("10.9.0.160/28")
	for i := range 16 {
		cidr := blockAt(pfx("10.9.0.0/24"), 28, i)
		if cidr == free {
			continue
		}
		nb := newBlock(cidr, "n2", 1, time.Now())
		sum, err := summarize(nb.encode())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.ds.Etcd().Put(ctx, summaryKeyOf(blockKey(cidr)), string(sum)); err != nil {
			t.Fatal(err)
		}
	}
	// A pending affinity of n1's at an orphan (another process of the
	// node mid-claim, or one before a crash): finishing it meets the
	// orphan too, and takes it back.
	pend := blockAt(pfx("10.9.0.0/24"), 28, 0)
	if _, err := e.ds.Etcd().Put(ctx, affinityKey("n1", pend), string(encodeAffinity(StatePending, time.Now()))); err != nil {
		t.Fatal(err)
	}
	ip := assign(t, c, "n1", "n1-a")
	if !free.Contains(ip) {
		t.Fatalf("assigned %s, want an address of the one claimable block %s", ip, free)
	}
	resp, err := e.ds.Etcd().Get(ctx, nodeAffinityPrefix("n1"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != affinityKey("n1", free) {
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		t.Fatalf("n1's affinities %q, want only %s's: the orphans' pending ones are withdrawn", keys, free)
	}
	err = c.AssignIP(ctx, mustParse("10.9.0.5"), "n1-b", "n1", Attributes{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "has no block") {
		t.Fatalf("AssignIP in a block whose summary is stored alone: %v, want ErrCorrupt naming the record", err)
	}
}

// TestLayoutManyOrphanSummaries: with nearly every block of a pool a
// summary stored without its block (a restore of the resources without
// the IPAM data), a claim meets one, then passes over all of them at
// once (one keys-only read), instead of trying to claim each, which
// costs a claim's writes per block and could spend the claim's budget
// before it reaches the free block.
func TestLayoutManyOrphanSummaries(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.9.0.0/20", 28)
	ctx := ctxT(t)
	e.node("n1", nil)
	e.node("n2", nil)
	free := blockAt(pfx("10.9.0.0/20"), 28, 200)
	for i := range 256 {
		cidr := blockAt(pfx("10.9.0.0/20"), 28, i)
		if cidr == free {
			continue
		}
		sum, err := summarize(newBlock(cidr, "n2", 1, time.Now()).encode())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.ds.Etcd().Put(ctx, summaryKeyOf(blockKey(cidr)), string(sum)); err != nil {
			t.Fatal(err)
		}
	}
	before := c.Stats()
	ip := assign(t, c, "n1", "n1-a")
	if !free.Contains(ip) {
		t.Fatalf("assigned %s, want an address of the one claimable block %s", ip, free)
	}
	// One orphan tried (its pending affinity written and withdrawn),
	// the free block claimed (pending, block, confirmed), the address
	// assigned: about ten transactions, against about three for each
	// of the 127 orphans a walk meets on average.
	after := c.Stats()
	if txns := after.Txns - before.Txns; txns > 20 {
		t.Fatalf("the claim took %d transactions past 255 orphaned summaries, want at most 20: it tried them one by one", txns)
	}
}
