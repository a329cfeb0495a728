package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
)

// TestDeletePoolRefusedWhileInUse: a pool with addresses allocated in two
// nodes' blocks is not deleted, the error counts them; once they are
// released it is.
func TestDeletePoolRefusedWhileInUse(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.6.0.0/24", 26)
	ctx := ctxT(t)
	for _, h := range []string{"a", "b", "c"} {
		assign(t, c, "n1", h)
	}
	assign(t, c, "n2", "d")

	err := c.DeletePool(ctx, "p", false)
	var inUse *PoolInUseError
	if !errors.Is(err, ErrPoolInUse) || !errors.As(err, &inUse) || inUse.Addresses != 4 || inUse.Blocks != 2 {
		t.Fatalf("DeletePool of a pool in use = %v, want ErrPoolInUse with 4 addresses in 2 blocks", err)
	}
	if _, err := e.ds.Get(ctx, api.KindIPPool, "p"); err != nil {
		t.Fatalf("the refused delete removed the pool: %v", err)
	}
	for _, h := range []string{"a", "b", "c", "d"} {
		if _, err := c.ReleaseByHandle(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.DeletePool(ctx, "p", false); err != nil {
		t.Fatalf("DeletePool of an unused pool: %v", err)
	}
	if _, err := e.ds.Get(ctx, api.KindIPPool, "p"); !datastore.IsNotFound(err) {
		t.Fatalf("pool still there after delete: %v", err)
	}
	if err := c.DeletePool(ctx, "p", false); !datastore.IsNotFound(err) {
		t.Fatalf("DeletePool of a missing pool = %v, want not found", err)
	}
}

// TestDeletePoolForce: --force deletes a pool in use; check then names
// the block left outside every pool.
func TestDeletePoolForce(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "p", "10.5.0.0/24", 26)
	e.node("n1", nil)
	ip := assign(t, c, "n1", "a")
	e.wep("n1", "a", "a", ip)
	if err := c.DeletePool(ctxT(t), "p", true); err != nil {
		t.Fatalf("DeletePool --force: %v", err)
	}
	rep, err := c.Check(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.OutsidePools) != 1 || !rep.OutsidePools[0].CIDR.Contains(ip) {
		t.Fatalf("outside pools %+v, want the block of %s", rep.OutsidePools, ip)
	}
}

// TestDeletePoolCountsAtCommit: an address allocated after the count and
// before the delete commits stops the delete (it is conditional on the
// blocks as counted), and blocks of an older blockSize count too.
func TestDeletePoolCountsAtCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := e.pool("p", "10.4.0.0/24", 26)
	c := New(e.ds)
	ctx := ctxT(t)

	before, err := c.snapshot(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	assign(t, c, "n1", "late")
	ok, err := c.deletePoolAt(ctx, before, "p", false)
	if err != nil || ok {
		t.Fatalf("delete at a count older than an allocation = %v, %v; want a conflict", ok, err)
	}
	if err := c.DeletePool(ctx, "p", false); !errors.Is(err, ErrPoolInUse) {
		t.Fatalf("DeletePool after the allocation = %v, want ErrPoolInUse", err)
	}

	// Allocations in other pools meanwhile do not stop it.
	e.pool("other", "10.40.0.0/24", 26)
	e.pool("empty", "10.4.1.0/24", 26)
	before, err = c.snapshot(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	assign(t, c, "n1", "elsewhere", func(a *AssignArgs) { a.Pools = []string{"other"} })
	if ok, err := c.deletePoolAt(ctx, before, "empty", false); err != nil || !ok {
		t.Fatalf("delete of an empty pool after an allocation in another = %v, %v; want deleted", ok, err)
	}

	// A blockSize written behind the datastore's back (before pools were
	// immutable): the /26 with the address no longer matches the pool's
	// block size, and must still count.
	p.Spec.BlockSize = 28
	raw, _ := json.Marshal(p)
	if _, err := e.ds.Etcd().Put(context.Background(), datastore.Key(api.KindIPPool, "p"), string(raw)); err != nil {
		t.Fatal(err)
	}
	var inUse *PoolInUseError
	if err := c.DeletePool(ctx, "p", false); !errors.As(err, &inUse) || inUse.Addresses != 1 || inUse.Blocks != 1 {
		t.Fatalf("DeletePool with a block of the old size in use = %v, want 1 address in 1 block", err)
	}
}

func TestBlockKeysWithin(t *testing.T) {
	for cidr, want := range map[string]string{
		"10.0.0.0/8": "10.", "10.4.0.0/16": "10.4.", "10.4.0.0/20": "10.4.", "10.4.1.0/24": "10.4.1.",
		"10.4.1.64/26": "10.4.1.", "10.4.1.7/32": "10.4.1.7-",
	} {
		p := pfx(cidr)
		if got := blockKeysWithin(p); got != blockPrefix+want {
			t.Errorf("blockKeysWithin(%s) = %q, want %q", cidr, got, blockPrefix+want)
		}
		if !strings.HasPrefix(blockKey(netip.PrefixFrom(p.Addr(), 32)), blockKeysWithin(p)) {
			t.Errorf("%s: its own block key is outside %q", cidr, blockKeysWithin(p))
		}
	}
	if strings.HasPrefix(blockKey(pfx("100.0.0.0/26")), blockKeysWithin(pfx("10.0.0.0/8"))) {
		t.Error("10.0.0.0/8 covers 100.0.0.0/26")
	}
}
