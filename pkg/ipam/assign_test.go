package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

func TestClaimAllocateRelease(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	ctx := ctxT(t)

	ip := assign(t, c, "n1", "net.c1")
	if !pfx("10.244.0.0/24").Contains(ip) {
		t.Fatalf("address %s outside the pool", ip)
	}
	blocks, err := c.BlocksForNode(ctx, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0].State != StateConfirmed || !blocks[0].CIDR.Contains(ip) || blocks[0].InUse != 1 {
		t.Fatalf("blocks for n1 = %+v, want one confirmed block holding %s", blocks, ip)
	}
	// Further addresses come from the same block, in order.
	ip2 := assign(t, c, "n1", "net.c2")
	ip3 := assign(t, c, "n1", "net.c3")
	if ip2 != ip.Next() || ip3 != ip2.Next() {
		t.Fatalf("addresses %s %s %s not taken from the head of the free list", ip, ip2, ip3)
	}
	info, err := c.IPInfo(ctx, ip2)
	if err != nil {
		t.Fatal(err)
	}
	if info.Handle != "net.c2" || info.Pod != "net.c2" || info.Node != "n1" || info.BlockNode != "n1" || info.Type != TypePod || info.Seq == 0 || info.Borrowed() {
		t.Fatalf("IPInfo = %+v", info)
	}

	freed, err := c.ReleaseByHandle(ctx, "net.c2")
	if err != nil || len(freed) != 1 || freed[0] != ip2 {
		t.Fatalf("ReleaseByHandle = %v, %v; want [%s]", freed, err, ip2)
	}
	if _, err := c.IPInfo(ctx, ip2); !errors.Is(err, ErrNotAllocated) {
		t.Fatalf("IPInfo after release: %v, want ErrNotAllocated", err)
	}
	// Idempotent: a second DEL, and an unknown handle, are fine.
	if freed, err := c.ReleaseByHandle(ctx, "net.c2"); err != nil || len(freed) != 0 {
		t.Fatalf("second release = %v, %v", freed, err)
	}
	if freed, err := c.ReleaseByHandle(ctx, "never-seen"); err != nil || len(freed) != 0 {
		t.Fatalf("unknown handle release = %v, %v", freed, err)
	}
	// A freed address goes to the tail: the next one is fresh.
	if ip4 := assign(t, c, "n1", "net.c4"); ip4 == ip2 {
		t.Fatalf("freed address %s reused at once", ip2)
	}
	// A second client (another process) sees the same state.
	if got, err := New(e.ds).IPsByHandle(ctx, "net.c3"); err != nil || len(got) != 1 || got[0] != ip3 {
		t.Fatalf("IPsByHandle = %v, %v", got, err)
	}
	mustVerify(t, c)
}

func TestSteadyStateIsOneTxn(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	e.node("n1", nil)
	assign(t, c, "n1", "warm")
	before := c.Stats()
	assign(t, c, "n1", "steady")
	d := c.Stats()
	if d.Txns-before.Txns != 1 || d.Gets != before.Gets {
		t.Fatalf("allocation in an owned block took %d txns and %d gets, want 1 and 0", d.Txns-before.Txns, d.Gets-before.Gets)
	}
}

func TestFIFOReuseOrder(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "tiny", "10.9.0.0/30", 30)
	ctx := ctxT(t)
	ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "all", Num: 4})
	if err != nil || len(ips) != 4 {
		t.Fatalf("AutoAssign 4 = %v, %v", ips, err)
	}
	// Free .1 then .0: they come back in that order.
	for _, ip := range []string{"10.9.0.1", "10.9.0.0"} {
		if _, err := c.ReleaseIPs(ctx, Release{IP: mustParse(ip)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := assign(t, c, "n1", "x"); got != mustParse("10.9.0.1") {
		t.Fatalf("got %s, want the first freed address 10.9.0.1", got)
	}
	if got := assign(t, c, "n1", "y"); got != mustParse("10.9.0.0") {
		t.Fatalf("got %s, want 10.9.0.0", got)
	}
	// The handle "all" lost two addresses; its record must say so.
	if got, _ := c.IPsByHandle(ctx, "all"); len(got) != 2 {
		t.Fatalf("handle after partial release holds %v", got)
	}
	mustVerify(t, c)
}

func TestHandleIdempotency(t *testing.T) {
	t.Parallel()
	e, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	ctx := ctxT(t)
	ip := assign(t, c, "n1", "net.retry")
	// A retried ADD, even from another process, gets the same address.
	if again := assign(t, New(e.ds), "n1", "net.retry"); again != ip {
		t.Fatalf("retry got %s, want %s", again, ip)
	}
	// Asking for two tops the handle up to two.
	ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "net.retry", Num: 2})
	if err != nil || len(ips) != 2 || ips[0] != ip {
		t.Fatalf("Num=2 = %v, %v; want %s plus one more", ips, err, ip)
	}
	if err := c.AssignIP(ctx, ip, "net.retry", "n1", Attributes{}); err != nil {
		t.Fatalf("AssignIP of an address the handle holds: %v", err)
	}
	mustVerify(t, c)
}

func TestSpecificIP(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	ctx := ctxT(t)
	want := mustParse("10.244.0.77")
	ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "static", IP: want})
	if err != nil || len(ips) != 1 || ips[0] != want {
		t.Fatalf("AutoAssign with IP = %v, %v", ips, err)
	}
	blocks, _ := c.BlocksForNode(ctx, "n1")
	if len(blocks) != 1 || blocks[0].CIDR != pfx("10.244.0.64/26") {
		t.Fatalf("block of the requested address not claimed for n1: %+v", blocks)
	}
	err = c.AssignIP(ctx, want, "other", "n2", Attributes{})
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `"static"`) {
		t.Fatalf("taken address: %v, want ErrInUse naming the holder", err)
	}
	// n2 may take a specific address in n1's block.
	if err := c.AssignIP(ctx, mustParse("10.244.0.78"), "n2-static", "n2", Attributes{}); err != nil {
		t.Fatal(err)
	}
	if err := c.AssignIP(ctx, mustParse("192.168.1.1"), "x", "n1", Attributes{}); !errors.Is(err, ErrNotInPool) {
		t.Fatalf("outside pools: %v, want ErrNotInPool", err)
	}
	// Normal allocation on n1 skips the taken addresses.
	for i := range 20 {
		if ip := assign(t, c, "n1", fmt.Sprintf("h%d", i)); ip == want {
			t.Fatalf("allocated the statically assigned %s again", ip)
		}
	}
	mustVerify(t, c)
}

func TestPoolSelection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("a-off", "10.1.0.0/24", 26, func(p *api.IPPool) { p.Spec.Disabled = true })
	e.pool("b-rack1", "10.2.0.0/24", 26, func(p *api.IPPool) { p.Spec.NodeSelector = "rack == 'r1'" })
	e.pool("c-all", "10.3.0.0/24", 26)
	e.node("n1", map[string]string{"rack": "r1"})
	e.node("n2", map[string]string{"rack": "r2"})
	c := New(e.ds)
	ctx := ctxT(t)

	if ip := assign(t, c, "n1", "h1"); !pfx("10.2.0.0/24").Contains(ip) {
		t.Fatalf("n1 got %s, want from b-rack1 (a-off is disabled)", ip)
	}
	if ip := assign(t, c, "n2", "h2"); !pfx("10.3.0.0/24").Contains(ip) {
		t.Fatalf("n2 got %s, want from c-all (b-rack1 does not select it)", ip)
	}
	if ip := assign(t, c, "n1", "h3", func(a *AssignArgs) { a.Pools = []string{"10.3.0.0/24"} }); !pfx("10.3.0.0/24").Contains(ip) {
		t.Fatalf("pool by CIDR: got %s", ip)
	}
	_, err := c.AutoAssign(ctx, AssignArgs{Node: "n2", HandleID: "h4", Pools: []string{"a-off", "b-rack1"}})
	if !errors.Is(err, ErrNoPool) || !strings.Contains(err.Error(), "disabled") || !strings.Contains(err.Error(), "does not select") {
		t.Fatalf("no eligible pool: %v", err)
	}
	if _, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "h5", Pools: []string{"nope"}}); !errors.Is(err, ErrNoPool) {
		t.Fatalf("unknown pool: %v", err)
	}
	// Relabelling n2 into rack r1 makes b-rack1 usable for it, even though
	// this client has n2 cached.
	e.node("n2", map[string]string{"rack": "r1"})
	if ip := assign(t, c, "n2", "h6", func(a *AssignArgs) { a.Pools = []string{"b-rack1"} }); !pfx("10.2.0.0/24").Contains(ip) {
		t.Fatalf("after relabel got %s", ip)
	}
	// Disabling a pool stops allocation from blocks already owned.
	e.pool("b-rack1", "10.2.0.0/24", 26, func(p *api.IPPool) {
		p.Spec.NodeSelector = "rack == 'r1'"
		p.Spec.Disabled = true
	})
	if ip := assign(t, c, "n1", "h7"); !pfx("10.3.0.0/24").Contains(ip) {
		t.Fatalf("after disabling b-rack1 n1 got %s", ip)
	}
	mustVerify(t, c)
}

func TestExhaustionNamesPool(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "default", "10.244.0.0/24", 26)
	ctx := ctxT(t)
	ips, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "bulk", Num: 256})
	if err != nil || len(ips) != 256 {
		t.Fatalf("filling the pool: %d addresses, %v", len(ips), err)
	}
	_, err = c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "one-more"})
	want := `ipam: no free addresses: pool "default" (10.244.0.0/24) exhausted for node "n1"`
	if !errors.Is(err, ErrExhausted) || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	mustVerify(t, c)
}

func TestBorrowing(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "one-block", "10.5.0.0/28", 28)
	ctx := ctxT(t)
	own := assign(t, c, "n1", "n1-pod")
	// n2 cannot claim a block (the pool has one) so it borrows from n1's.
	borrowed := assign(t, c, "n2", "n2-pod")
	info, err := c.IPInfo(ctx, borrowed)
	if err != nil || info.BlockNode != "n1" || info.Node != "n2" || !info.Borrowed() {
		t.Fatalf("borrowed %s: %+v, %v", borrowed, info, err)
	}
	if info, err := c.IPInfo(ctx, own); err != nil || info.BlockNode != "n1" || info.Node != "n1" || info.Borrowed() {
		t.Fatalf("n1's own %s: %+v, %v", own, info, err)
	}
	u, err := c.Usage(ctx)
	if err != nil || len(u.Pools) != 1 || u.Pools[0].InUse != 2 || u.Pools[0].Borrowed != 1 || u.Pools[0].Free != 14 {
		t.Fatalf("Usage = %+v, %v", u, err)
	}
	if own == borrowed {
		t.Fatal("same address twice")
	}
	mustVerify(t, c)
}

func TestStrictAffinity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("one-block", "10.5.0.0/28", 28)
	e.ipamConfig(api.IPAMConfigurationSpec{StrictAffinity: true})
	c := New(e.ds)
	assign(t, c, "n1", "n1-pod")
	_, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n2", HandleID: "n2-pod"})
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "strictAffinity") || !strings.Contains(err.Error(), `pool "one-block"`) {
		t.Fatalf("strict affinity: %v", err)
	}
}

func TestMaxBlocksPerHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.pool("p", "10.6.0.0/26", 28) // four blocks of 16
	e.ipamConfig(api.IPAMConfigurationSpec{MaxBlocksPerHost: 1})
	c := New(e.ds)
	ctx := ctxT(t)
	if _, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "fill", Num: 16}); err != nil {
		t.Fatal(err)
	}
	_, err := c.AutoAssign(ctx, AssignArgs{Node: "n1", HandleID: "17th"})
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), "maxBlocksPerHost is 1") {
		t.Fatalf("over the block cap with nothing to borrow: %v", err)
	}
	// Once another node has a block, n1 borrows from it.
	assign(t, c, "n2", "n2-pod")
	ip := assign(t, c, "n1", "17th")
	if info, _ := c.IPInfo(ctx, ip); info == nil || info.BlockNode != "n2" {
		t.Fatalf("17th address %s not borrowed from n2: %+v", ip, info)
	}
	if blocks, _ := c.BlocksForNode(ctx, "n1"); len(blocks) != 1 {
		t.Fatalf("n1 holds %d blocks, cap is 1", len(blocks))
	}
	// autoAllocateBlocks=false: no claims at all, only borrowing.
	e.ipamConfig(api.IPAMConfigurationSpec{AutoAllocateBlocks: new(false)})
	ip = assign(t, c, "n3", "n3-pod")
	if info, _ := c.IPInfo(ctx, ip); info == nil || info.BlockNode == "n3" {
		t.Fatalf("n3 claimed a block with autoAllocateBlocks false: %+v", info)
	}
	mustVerify(t, c)
}

func TestStaleSequenceRelease(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "p", "10.7.0.0/24", 26)
	ctx := ctxT(t)
	ip := assign(t, c, "n1", "first")
	old, err := c.IPInfo(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseByHandle(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	if err := c.AssignIP(ctx, ip, "second", "n1", Attributes{}); err != nil {
		t.Fatal(err)
	}
	freed, err := c.ReleaseIPs(ctx, Release{IP: ip, Seq: old.Seq})
	var stale *StaleSequenceError
	if !errors.Is(err, ErrStaleSequence) || !errors.As(err, &stale) || stale.IP != ip || len(freed) != 0 {
		t.Fatalf("stale release = %v, %v; want a StaleSequenceError", freed, err)
	}
	cur, err := c.IPInfo(ctx, ip)
	if err != nil || cur.Handle != "second" {
		t.Fatalf("reallocated address was freed by a stale release: %+v %v", cur, err)
	}
	if freed, err := c.ReleaseIPs(ctx, Release{IP: ip, Seq: cur.Seq}); err != nil || len(freed) != 1 {
		t.Fatalf("release with the current sequence = %v, %v", freed, err)
	}
	// Releasing a free address is not an error.
	if freed, err := c.ReleaseIPs(ctx, Release{IP: ip}, Release{IP: netip.MustParseAddr("1.2.3.4")}); err != nil || len(freed) != 0 {
		t.Fatalf("release of free addresses = %v, %v", freed, err)
	}
	mustVerify(t, c)
}

func TestTunnelAddress(t *testing.T) {
	t.Parallel()
	_, c := poolEnv(t, "p", "10.8.0.0/24", 26)
	ips, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n1", HandleID: TunnelHandle("n1"), Attrs: Attributes{Type: TypeTunnel}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.IPInfo(ctxT(t), ips[0])
	if err != nil || info.Type != TypeTunnel || info.Handle != "ipip-tunnel-addr-n1" {
		t.Fatalf("tunnel allocation %+v %v", info, err)
	}
	if _, err := c.AutoAssign(ctxT(t), AssignArgs{Node: "n1", HandleID: "x", Attrs: Attributes{Type: "vm"}}); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("bad type accepted: %v", err)
	}
}
