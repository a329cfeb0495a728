package ipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// keyExtra writes (or, with del, deletes at the revision it believes)
// one key beside an assignment, as routed's CNI service does with a
// WorkloadEndpoint.
type keyExtra struct {
	key       string
	del       bool
	rev       int64 // del: the revision the key is believed to have
	observed  int
	committed int64
}

func (k *keyExtra) Writes(addrs []netip.Addr) ([]ExtraWrite, error) {
	if k.del {
		return []ExtraWrite{{Key: k.key, Rev: k.rev}}, nil
	}
	return []ExtraWrite{{Key: k.key, AnyRev: true, Value: []byte(fmt.Sprint(addrs))}}, nil
}

func (k *keyExtra) Observe(key string, kv *mvccpb.KeyValue) error {
	k.observed++
	k.rev = modRev(kv)
	return nil
}

func (k *keyExtra) Committed(rev int64) { k.committed = rev }

// rawGet reads a key: its value and ModRevision (0: absent).
func rawGet(t *testing.T, c *Client, key string) (string, int64) {
	t.Helper()
	resp, err := c.kv.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

// TestAssignWithExtra: once the node's block is claimed and cached, an
// assignment with an Extra is one transaction that writes the block,
// the handle and the caller's key together; a retried assignment of the
// same handle writes the key again with the same addresses (one
// transaction guarded on the handle); a release with an Extra deletes
// the key and frees the address in one transaction, and again after
// that (DEL may run many times).
func TestAssignWithExtra(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	ctx := ctxT(t)
	assign(t, c, "n1", "net.warm") // claims and caches the block

	x := &keyExtra{key: "/test/extra/c1"}
	before := c.Stats()
	ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.c1", Extra: x})
	if err != nil || len(ips) != 1 {
		t.Fatalf("AutoAssign with extra = %v, %v", ips, err)
	}
	after := c.Stats()
	if n := after.Txns - before.Txns + after.Gets - before.Gets; n != 1 {
		t.Errorf("assignment with extra took %d etcd requests, want 1 transaction (%+v -> %+v)", n, before, after)
	}
	val, rev := rawGet(t, c, x.key)
	if val != fmt.Sprint(ips) || rev != x.committed {
		t.Fatalf("extra key = %q at %d (committed %d), want %q", val, rev, x.committed, fmt.Sprint(ips))
	}
	if _, hrev := rawGet(t, c, handleKey("net.c1")); hrev != rev {
		t.Fatalf("handle written at %d, extra at %d: not one transaction", hrev, rev)
	}

	// A retried ADD: a fresh client (a restarted daemon), same handle.
	c2 := New(e.ds)
	x2 := &keyExtra{key: "/test/extra/c1"}
	again, err := c2.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.c1", Extra: x2})
	if err != nil || len(again) != 1 || again[0] != ips[0] {
		t.Fatalf("retried AutoAssign = %v, %v; want %v", again, err, ips)
	}
	if val, rev := rawGet(t, c, x.key); val != fmt.Sprint(ips) || rev != x2.committed || rev == x.committed {
		t.Fatalf("retry: extra key %q at %d (committed %d)", val, rev, x2.committed)
	}

	// Release believing the key absent: the lost write observes it and
	// the next attempt deletes it with the handle.
	d := &keyExtra{key: x.key, del: true}
	freed, err := c.ReleaseByHandleWith(ctx, "net.c1", d)
	if err != nil || len(freed) != 1 || freed[0] != ips[0] {
		t.Fatalf("ReleaseByHandleWith = %v, %v", freed, err)
	}
	if d.observed == 0 {
		t.Errorf("a delete at the wrong revision was not retried after observing the key")
	}
	if val, rev := rawGet(t, c, x.key); rev != 0 {
		t.Fatalf("extra key still there after the release: %q at %d", val, rev)
	}
	if _, hrev := rawGet(t, c, handleKey("net.c1")); hrev != 0 {
		t.Fatal("handle still there after the release")
	}
	// Again: nothing held, the extra is still written (the key stays
	// absent), no error.
	d2 := &keyExtra{key: x.key, del: true}
	if freed, err := c.ReleaseByHandleWith(ctx, "net.c1", d2); err != nil || len(freed) != 0 || d2.committed == 0 {
		t.Fatalf("second release = %v, %v (committed %d)", freed, err, d2.committed)
	}
	mustVerify(t, c)
}

// TestAssignExtraFixedIP: a fixed address with an Extra writes the key
// naming it.
func TestAssignExtraFixedIP(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	x := &keyExtra{key: "/test/extra/fixed"}
	ip := mustParse("10.244.0.77")
	if _, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n1", HandleID: "net.f", IP: ip, Extra: x}); err != nil {
		t.Fatal(err)
	}
	if val, _ := rawGet(t, c, x.key); val != fmt.Sprint([]netip.Addr{ip}) {
		t.Fatalf("extra key = %q", val)
	}
}

// TestExtraHandleReleased: writing with a handle that was released
// meanwhile fails with ErrReleased and writes nothing.
func TestExtraHandleReleased(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	ctx := ctxT(t)
	ip := assign(t, c, "n1", "net.r")
	hkey := handleKey("net.r")
	_, hrev, _ := c.handles.get(hkey)
	if _, err := New(e.ds).ReleaseByHandle(ctx, "net.r"); err != nil {
		t.Fatal(err)
	}
	x := &keyExtra{key: "/test/extra/r"}
	err := c.writeExtraHeld(ctx, hkey, hrev, []netip.Addr{ip}, x)
	if !errors.Is(err, ErrReleased) {
		t.Fatalf("write with a released handle: %v, want ErrReleased", err)
	}
	if _, rev := rawGet(t, c, x.key); rev != 0 {
		t.Fatal("extra key written for a released handle")
	}
}

// TestWatchedPools: with WithWatchedPools a family no cached pool serves
// fails with ErrNoPool without a read; after Invalidate a new pool is
// seen.
func TestWatchedPools(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26, WithWatchedPools())
	e.node("n1", nil)
	ctx := ctxT(t)
	assign(t, c, "n1", "net.w4")
	before := c.Stats()
	_, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.w6", Family: 6})
	if !errors.Is(err, ErrNoPool) {
		t.Fatalf("IPv6 without an IPv6 pool: %v, want ErrNoPool", err)
	}
	if after := c.Stats(); after.Txns+after.Gets != before.Txns+before.Gets {
		t.Errorf("ErrNoPool from the watched view still read etcd: %+v -> %+v", before, after)
	}
	e.pool("v6", "fd00:10::/120", 124)
	if _, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.w6", Family: 6}); !errors.Is(err, ErrNoPool) {
		t.Fatalf("before Invalidate the view is trusted: %v", err)
	}
	c.Invalidate()
	ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.w6", Family: 6})
	if err != nil || len(ips) != 1 || !strings.HasPrefix(ips[0].String(), "fd00:10::") {
		t.Fatalf("after Invalidate: %v, %v", ips, err)
	}
}
