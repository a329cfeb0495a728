package ipam

import (
	"testing"
)

// TestReadHandleWith: a fresh client (a CNI DEL's) that reads the
// handle with the caller's key then releases with one more read (the
// blocks) and one transaction; a handle changed between that read and
// the release is released as it is by then (the cached copy only costs
// a lost write); an absent handle and key read as nil.
func TestReadHandleWith(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	ctx := ctxT(t)
	ip := assign(t, New(e.ds), "n1", "net.d1")
	if _, err := e.ds.Etcd().Put(ctx, "/test/prefetch/wep", "w"); err != nil {
		t.Fatal(err)
	}

	c := New(e.ds)
	kvs, err := c.ReadHandleWith(ctx, "net.d1", "/test/prefetch/wep", "/test/prefetch/none")
	if err != nil || len(kvs) != 2 || kvs[0] == nil || string(kvs[0].Value) != "w" || kvs[1] != nil {
		t.Fatalf("ReadHandleWith = %v, %v; want the key's value and nil", kvs, err)
	}
	before := c.Stats()
	freed, err := c.ReleaseByHandle(ctx, "net.d1")
	if err != nil || len(freed) != 1 || freed[0] != ip {
		t.Fatalf("release = %v, %v; want %s", freed, err, ip)
	}
	after := c.Stats()
	if gets, txns := after.Gets-before.Gets, after.Txns-before.Txns; gets != 0 || txns != 2 {
		t.Errorf("release after ReadHandleWith: %d gets, %d transactions; want 0 and 2 (the blocks' read, the write)", gets, txns)
	}

	// The handle changes after it was read: a second address joins it.
	ip2 := assign(t, New(e.ds), "n1", "net.d2")
	c = New(e.ds)
	if _, err := c.ReadHandleWith(ctx, "net.d2"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(e.ds).AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.d2", Num: 2}); err != nil {
		t.Fatal(err)
	}
	freed, err = c.ReleaseByHandle(ctx, "net.d2")
	if err != nil || len(freed) != 2 || freed[0] != ip2 {
		t.Fatalf("release of a handle changed since it was read = %v, %v; want %s and the one added", freed, err, ip2)
	}

	if kvs, err := New(e.ds).ReadHandleWith(ctx, "net.gone"); err != nil || len(kvs) != 0 {
		t.Fatalf("absent handle: %v, %v", kvs, err)
	}
	if _, err := c.ReadHandleWith(ctx, "bad/handle"); err == nil {
		t.Error("a handle with a slash was read")
	}
	mustVerify(t, c)
}
