package ipam

import (
	"testing"
)

// TestBlockHint: a fresh client given the node's blocks (OwnBlocks of
// an earlier client) assigns with one read and one transaction; with a
// wrong hint (a block that does not exist, another node's, a key that
// is not a block's) it assigns as correctly, with the blocks' read it
// would have made anyway.
func TestBlockHint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	e.node("n2", nil)
	ctx := ctxT(t)
	first := New(e.ds)
	assign(t, first, "n1", "net.h0")
	assign(t, New(e.ds), "n2", "net.other")
	own, err := first.OwnBlocks(ctx, "n1")
	if err != nil || len(own) != 1 {
		t.Fatalf("OwnBlocks = %v, %v; want the one block", own, err)
	}
	other, err := New(e.ds).OwnBlocks(ctx, "n9")
	if err != nil || len(other) != 0 {
		t.Fatalf("OwnBlocks of a node never allocated for = %v, %v; want none", other, err)
	}

	c := New(e.ds, WithBlockHint(own))
	before := c.Stats()
	ip := assign(t, c, "n1", "net.h1")
	after := c.Stats()
	if n := after.Txns - before.Txns + after.Gets - before.Gets; n != 2 {
		t.Errorf("assignment with the node's blocks hinted took %d etcd requests, want 2 (one read, one write)", n)
	}
	if ip.String() == "" {
		t.Fatal("no address")
	}

	for _, hint := range [][]string{
		{blockPrefix + "10.245.0.0-26"},            // no such block
		{"/routed/v1/ipam/handles/net.h0", "junk"}, // not block keys
		nil,
	} {
		c := New(e.ds, WithBlockHint(hint))
		before := c.Stats()
		assign(t, c, "n1", "net.bad"+string(rune('a'+len(hint))))
		after := c.Stats()
		if n := after.Txns - before.Txns + after.Gets - before.Gets; n != 3 {
			t.Errorf("hint %v: %d etcd requests, want 3 (the unhinted cost)", hint, n)
		}
	}
	// Another node's block hinted: read, but not allocated from.
	c = New(e.ds)
	assign(t, c, "n2", "net.n2b")
	n2own, err := c.OwnBlocks(ctx, "n2")
	if err != nil || len(n2own) != 1 {
		t.Fatalf("OwnBlocks(n2) = %v, %v", n2own, err)
	}
	c = New(e.ds, WithBlockHint(n2own))
	got := assign(t, c, "n1", "net.h2")
	if p, err := parseBlockKey(own[0]); err != nil || !p.Contains(got) {
		t.Errorf("with another node's block hinted, n1 got %s, outside its own block %s (%v)", got, own[0], err)
	}
	mustVerify(t, c)
}
