package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
)

func TestAddrArithmeticBothFamilies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		base  string
		off   uint64
		shift int
		want  string
	}{
		{"10.244.0.0", 5, 0, "10.244.0.5"},
		{"10.244.0.0", 3, 6, "10.244.0.192"},
		{"10.244.0.0", 4, 6, "10.244.1.0"},
		{"fd00:10:244::", 5, 0, "fd00:10:244::5"},
		{"fd00:10:244::", 1, 6, "fd00:10:244::40"},
		// Carry from the low into the high 64 bits.
		{"fd00::ffff:ffff:ffff:ffc0", 1, 6, "fd00:0:0:1::"},
		// A block index shifted past bit 64 (a /48 pool of /122 blocks
		// has 2^74 of them).
		{"fd00:10:244::", 1, 70, "fd00:10:244:40::"},
		{"fd00:10:244::", 3, 64, "fd00:10:244:3::"},
	}
	for _, c := range cases {
		got := addrPlus(netip.MustParseAddr(c.base), c.off, c.shift)
		if got.String() != c.want {
			t.Errorf("addrPlus(%s, %d, %d) = %s, want %s", c.base, c.off, c.shift, got, c.want)
		}
	}
	if got := blockAt(pfx("fd00:10:244::/48"), 122, 5); got != pfx("fd00:10:244::140/122") {
		t.Errorf("blockAt = %s", got)
	}
	b := &block{prefix: pfx("fd00:10:244::140/122")}
	if b.size() != 64 {
		t.Errorf("size of a /122 = %d, want 64", b.size())
	}
	if o, ok := b.ordinal(netip.MustParseAddr("fd00:10:244::17f")); !ok || o != 63 {
		t.Errorf("ordinal = %d, %v; want 63", o, ok)
	}
	if _, ok := b.ordinal(netip.MustParseAddr("fd00:10:244::180")); ok {
		t.Error("an address past the block has an ordinal")
	}
}

// TestDualStackAssignment: a handle holds one address per family, each
// family's pools serve only that family, a retry returns the same pair,
// release frees both, and ipam check is clean throughout.
func TestDualStackAssignment(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("v4", "10.244.0.0/24", 26)
	e.pool("v6", "fd00:10:244::/48", 122)
	e.node("n1", nil)
	e.node("n2", nil)
	c := New(e.ds)
	ctx := ctxT(t)

	v4 := assign(t, c, "n1", "net.c1")
	v6 := assign(t, c, "n1", "net.c1", func(a *AssignArgs) { a.Family = 6 })
	if !pfx("10.244.0.0/24").Contains(v4) || !pfx("fd00:10:244::/48").Contains(v6) {
		t.Fatalf("addresses %s, %s: want one from each pool", v4, v6)
	}
	// A retried ADD gets the same addresses back, per family.
	if again := assign(t, c, "n1", "net.c1", func(a *AssignArgs) { a.Family = 6 }); again != v6 {
		t.Fatalf("retry got %s, want %s", again, v6)
	}
	held, err := c.IPsByHandle(ctx, "net.c1")
	if err != nil || len(held) != 2 {
		t.Fatalf("handle holds %v, %v; want both", held, err)
	}
	blocks, err := c.BlocksForNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	var v6Block netip.Prefix
	for _, b := range blocks {
		if b.CIDR.Addr().Is6() {
			v6Block = b.CIDR
		}
	}
	if v6Block.Bits() != 122 || !v6Block.Contains(v6) {
		t.Fatalf("blocks %+v: want a /122 holding %s", blocks, v6)
	}
	// Another node claims another /122; 64 addresses per block.
	seen := map[netip.Addr]string{v6: "net.c1"}
	for i := range 70 {
		h := fmt.Sprintf("net.n2-%d", i)
		a := assign(t, c, "n2", h, func(a *AssignArgs) { a.Family = 6 })
		if v6Block.Contains(a) {
			t.Fatalf("n2 got %s from n1's block %s", a, v6Block)
		}
		if prev, dup := seen[a]; dup {
			t.Fatalf("%s assigned to %s and %s", a, prev, h)
		}
		seen[a] = h
	}
	n2, err := c.BlocksForNode(ctx, "n2")
	if err != nil || len(n2) != 2 {
		t.Fatalf("n2 blocks %+v, %v; want two /122s for 70 addresses", n2, err)
	}
	// A fixed IPv6 address.
	fixed := netip.MustParseAddr("fd00:10:244:99::7")
	if err := c.AssignIP(ctx, fixed, "net.fixed", "n1", Attributes{Pod: "fixed"}); err != nil {
		t.Fatalf("AssignIP(%s): %v", fixed, err)
	}
	if info, err := c.IPInfo(ctx, fixed); err != nil || info.Handle != "net.fixed" {
		t.Fatalf("IPInfo(%s) = %+v, %v", fixed, info, err)
	}
	// Naming a pool of the other family is a clear error.
	_, err = c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.x", Family: 6, Pools: []string{"v4"}})
	if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "not an IPv6 pool") {
		t.Fatalf("v4 pool for an IPv6 request: %v", err)
	}

	u, err := c.Usage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range u.Pools {
		if p.Name == "v6" && (p.SizeBits != 80 || p.Size <= 0 || p.InUse != 72 || p.Free <= 0) {
			t.Errorf("usage of the /48: %+v (want 2^80 addresses, 72 in use, none negative)", p)
		}
	}
	freed, err := c.ReleaseByHandle(ctx, "net.c1")
	if err != nil || len(freed) != 2 {
		t.Fatalf("release = %v, %v; want both addresses", freed, err)
	}
	rep, err := c.Check(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The n2 and fixed handles have no endpoints: leaks, nothing else.
	if n := rep.Problems() - len(rep.Leaks); n != 0 {
		t.Fatalf("check found %d problems besides leaks: %+v", n, rep)
	}
	if len(rep.Leaks) != 71 {
		t.Fatalf("check found %d leaks, want 71 (70 on n2 and the fixed address)", len(rep.Leaks))
	}
}

// TestIPv6OnlyNodeHasNoIPv4Pools: with only an IPv6 pool, an IPv4
// request fails naming the family, and an IPv6 one works.
func TestIPv6OnlyPools(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "v6", "fd00:20::/64", 122)
	e.node("n1", nil)
	_, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n1", HandleID: "net.a"})
	if !errors.Is(err, ErrNoPool) || !strings.Contains(err.Error(), "no IPv4 pools exist") {
		t.Fatalf("IPv4 request with IPv6 pools only: %v", err)
	}
	if a := assign(t, c, "n1", "net.a", func(a *AssignArgs) { a.Family = 6 }); !a.Is6() {
		t.Fatalf("got %s", a)
	}
}

// TestParallelIPv6Claims: several nodes claim /122s of one pool at once;
// no address is handed out twice.
func TestParallelIPv6Claims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("v6", "fd00:30::/116", 122) // 64 blocks of 64
	var mu sync.Mutex
	seen := map[netip.Addr]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for n := range 4 {
		node := fmt.Sprintf("n%d", n)
		e.node(node, nil)
		c := New(e.ds)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				h := fmt.Sprintf("net.%s-%d", node, i)
				ips, err := c.AutoAssign(ctxT(t), AssignArgs{Node: node, HandleID: h, Family: 6})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				if prev, dup := seen[ips[0]]; dup {
					errs <- fmt.Errorf("%s held by %s and %s", ips[0], prev, h)
				}
				seen[ips[0]] = h
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != 160 {
		t.Fatalf("%d distinct addresses, want 160", len(seen))
	}
	rep, err := New(e.ds).Check(ctxT(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Overlaps) != 0 || len(rep.Inconsistencies) != 0 || len(rep.OutsidePools) != 0 {
		t.Fatalf("check: %+v", rep)
	}
}
