//go:build !race

package bgp

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v4/api"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// TestNoExportCIDRs: blocks inside a no-export CIDR (Calico's
// disableBGPExport pool) reach no peer, the others do; lifting it
// advertises them, setting it again withdraws them, without a session
// reset. The no-export list mixes IPv4 and IPv6 CIDRs, as a dual-stack
// cluster's pools do (GoBGP keeps one family per prefix set).
func TestNoExportCIDRs(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	private := netip.MustParsePrefix("10.66.1.0/26")
	public := netip.MustParsePrefix("10.65.1.0/26")
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.66.0.0/16"), netip.MustParsePrefix("fd00:66::/48")})
	for _, p := range []netip.Prefix{public, private} {
		a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: p, State: AffinityConfirmed}, false)
	}
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(public, a.addr)); err != nil {
		t.Fatal(err)
	}
	if p := waitPeer(t, b.sp, a.addr, established); p.Accepted != 1 {
		t.Fatalf("b accepted %d routes from a, want 1 (the private block is not exported): %v", p.Accepted, b.sink.Routes())
	}
	since := waitPeer(t, a.sp, b.addr, established).Since

	a.sp.SetNoExportCIDRs(nil)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(private, a.addr)); err != nil {
		t.Fatalf("export allowed again: %v", err)
	}
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.66.0.0/16"), netip.MustParsePrefix("fd00:66::/48")})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(private)); err != nil {
		t.Fatalf("export disabled again: %v", err)
	}
	if got := b.sink.Routes(); got[public] != a.addr {
		t.Fatalf("the public block went too: %v", got)
	}
	if p := waitPeer(t, a.sp, b.addr, established); !p.Since.Equal(since) {
		t.Errorf("session reset (since %v, now %v)", since, p.Since)
	}
}

// TestNoExportChangeNeverLeaks: a change of the no-export CIDRs, with a
// session whose BGPFilter accepts the private pool, never sends that
// pool: the new no-export policy takes the old one's place in one step,
// before the filters (before, the old was deleted first, and the new one
// was appended behind the filter and the peers soft-reset before the
// filters were moved: the block reached the peer and was withdrawn
// again in two of seven runs of a review's test; this one did not catch
// the previous code in four runs: a guard, not a reproduction). Twenty
// changes, then a block announced after them reaches the peer: the
// private block never did.
func TestNoExportChangeNeverLeaks(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, _, c, _, toC, _ := filterLab(l)
	private, other := netip.MustParsePrefix("10.70.1.0/26"), netip.MustParsePrefix("10.72.1.0/26")
	for _, p := range []netip.Prefix{private, other} {
		a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: p, State: AffinityConfirmed}, false)
	}
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: {Export: []FilterRule{{Accept: true, Op: "In", CIDR: netip.MustParsePrefix("10.64.0.0/10")}}}})
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.70.0.0/16")})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(other, a.addr)); err != nil {
		t.Fatal(err)
	}
	changeNoExport(t, a, c, other, 20, nil)
	later := netip.MustParsePrefix("10.73.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: later, State: AffinityConfirmed}, false)
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, a.addr)); err != nil {
		t.Fatal(err)
	}
	// FirstSeen forgets a route once withdrawn: a leak the soft reset
	// took back shows in the withdrawals.
	_, held := c.sink.Routes()[private]
	if n := c.sink.Withdrawals()[private]; held || n > 0 {
		t.Fatalf("c got the no-export block %s through its filter's Accept (held now: %v, withdrawn %d times)", private, held, n)
	}
}

// TestOwnPoliciesStayBeforeFilters: at every change of GoBGP's export
// list, routed's own policies come before every BGPFilter policy, and
// once no-export CIDRs are set a no-export policy is in the list: while
// they change six times, and while a peer needing routed's keep-next-hop
// policy is added after the filters. (Appended, as GoBGP's own call
// does, an own policy sat behind the filters until they were moved; a
// no-export change deleting the old policy first left none.)
func TestOwnPoliciesStayBeforeFilters(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, _, c, d, toC, toD := filterLab(l)
	other := netip.MustParsePrefix("10.72.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: other, State: AffinityConfirmed}, false)
	var mu sync.Mutex
	var violations []string
	checks := 0
	var noExportSet atomic.Bool
	hook := func() {
		names := globalPolicies(a, api.PolicyDirection_POLICY_DIRECTION_EXPORT)
		mu.Lock()
		defer mu.Unlock()
		checks++
		firstFilter := slices.IndexFunc(names, func(n string) bool { return strings.HasPrefix(n, filterPolicyPrefix) })
		lastOwn := -1
		for i, n := range names {
			if !strings.HasPrefix(n, filterPolicyPrefix) {
				lastOwn = i
			}
		}
		if firstFilter >= 0 && lastOwn > firstFilter {
			violations = append(violations, fmt.Sprintf("own policy behind a filter: %v", names))
		}
		if noExportSet.Load() && !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, noExportPolicy+"-g") }) {
			violations = append(violations, fmt.Sprintf("no no-export policy: %v", names))
		}
	}
	a.sp.assignedHook.Store(&hook)
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: {Export: []FilterRule{{Accept: true, Op: "In", CIDR: netip.MustParsePrefix("10.64.0.0/10")}}}})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(other, a.addr)); err != nil {
		t.Fatal(err)
	}
	changeNoExport(t, a, c, other, 6, func() { noExportSet.Store(true) })
	toD.KeepOriginalNextHop = true
	a.sp.SetPeers([]Peer{toC, toD})
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(other, a.addr)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if checks < 8 {
		t.Fatalf("the export list changed %d times, want at least 8: the check saw too little", checks)
	}
	if len(violations) > 0 {
		t.Fatalf("%d of %d changes of the export list broke the order, e.g. %s", len(violations), checks, violations[0])
	}
}

// changeNoExport changes a's no-export CIDRs n times, 10.70.0.0/16 and
// by turns 10.72.0.0/16 (which holds other), each time waiting until c
// has lost or got other back; after is called after each.
func changeNoExport(t *testing.T, a, c *testNode, other netip.Prefix, n int, after func()) {
	t.Helper()
	for i := range n {
		cidrs := []netip.Prefix{netip.MustParsePrefix("10.70.0.0/16")}
		want := bgptest.Has(other, a.addr)
		if i%2 == 0 {
			cidrs = append(cidrs, netip.MustParsePrefix("10.72.0.0/16"))
			want = bgptest.Lacks(other)
		}
		a.sp.SetNoExportCIDRs(cidrs)
		if err := c.sink.WaitFor(ctxT(t, 20*time.Second), want); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		if after != nil {
			after()
		}
	}
}

// TestNoExportNewPoolWithItsBlock: one pass that brings a new pool with
// disableBGPExport together with the node's first block in it (confd's
// datastore snapshot and the IPAM watch both landed before the loop
// ran) never sends that block to a peer, not even for a moment: the
// no-export policy is in place before the block's path enters GoBGP's
// RIB. Before, the paths were added first (GoBGP advertised the block
// at once) and the no-export policy's soft reset withdrew it after. A
// block announced after it reaches the peer; the peer never held the
// private block (nor had it withdrawn).
func TestNoExportNewPoolWithItsBlock(t *testing.T) {
	t.Parallel()
	a, b := pairWithBlock(t, netip.MustParsePrefix("10.65.1.0/26"))
	rejectedInOnePass(t, a, b, "no-export policy", noExportIn, func(private netip.Prefix) {
		pool := netip.PrefixFrom(private.Addr(), 16).Masked()
		a.sp.want.noExport = append(slices.Clone(a.sp.want.noExport), pool)
	})
}

// pairWithBlock starts iBGP speakers a and b, a announcing first, and
// returns once b holds it and a's session to b is up.
func pairWithBlock(t *testing.T, first netip.Prefix) (a, b *testNode) {
	t.Helper()
	l := newLoopLab(t)
	a, b = l.speaker(1, 64512), l.speaker(2, 64512)
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: first, State: AffinityConfirmed}, false)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(first, a.addr)); err != nil {
		t.Fatal(err)
	}
	waitPeer(t, a.sp, b.addr, established)
	return a, b
}

// rejectedInOnePass, three times, has one pass of a's loop bring both
// a new block 10.8x.1.0/26 and what rejects it towards b (change, called
// with the block inside the wanted state's lock), and checks that b
// never got the block (neither holds it nor had it withdrawn). The pass
// is over once installed(a) names a new policy; a block announced after
// it (sorted after the rejected one) reaches b behind anything that
// pass sent b.
func rejectedInOnePass(t *testing.T, a, b *testNode, what string, installed func(*testNode) string, change func(rejected netip.Prefix)) {
	t.Helper()
	// The rejected block's path, once in a's RIB, has time to reach b
	// before the pass goes on (GoBGP coalesces an announcement and a
	// withdrawal still queued together: without the pause the old code
	// leaked in about half the passes).
	pause := func(p netip.Prefix) {
		if p.Addr().As4()[1] >= 80 && p.Addr().As4()[1] < 90 {
			time.Sleep(300 * time.Millisecond)
		}
	}
	a.sp.pathHook.Store(&pause)
	for i := range 3 {
		rejected := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(80 + i), 1, 0}), 26)
		before := installed(a)
		a.sp.want.update(func() {
			change(rejected)
			a.sp.want.blocks[rejected] = true
		})
		testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
			if now := installed(a); now != "" && now != before {
				return ""
			}
			return "the new " + what + " was never installed"
		})
		later := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(90 + i), 1, 0}), 26)
		a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: later, State: AffinityConfirmed}, false)
		if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, a.addr)); err != nil {
			t.Fatal(err)
		}
		_, held := b.sink.Routes()[rejected]
		if n := b.sink.Withdrawals()[rejected]; held || n > 0 {
			t.Fatalf("pass %d: b got a's block %s that the %s of the same pass rejects (held now: %v, withdrawn %d times)", i, rejected, what, held, n)
		}
	}
}

// noExportIn is the no-export policy in n's global export list ("" for
// none).
func noExportIn(n *testNode) string {
	for _, name := range globalPolicies(n, api.PolicyDirection_POLICY_DIRECTION_EXPORT) {
		if strings.HasPrefix(name, noExportPolicy+"-g") {
			return name
		}
	}
	return ""
}

// TestNoExportFailureHoldsBackItsBlocks: while the no-export policy of
// a new pool with disableBGPExport cannot be installed (GoBGP refuses
// to put it in the export list), a block of that pool is not added to
// GoBGP's RIB, and the other routes of the same pass are (before the
// no-export policy went before the paths, the block was advertised at
// once; returning before the paths would have held back every route).
// Once the policy installs, the block is added, and b never held it.
func TestNoExportFailureHoldsBackItsBlocks(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, b := l.speaker(1, 64512), l.speaker(2, 64512)
	public := netip.MustParsePrefix("10.65.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: public, State: AffinityConfirmed}, false)
	a.sp.SetPeers([]Peer{meshPeer(l, a, b, 64512)})
	b.sp.SetPeers([]Peer{meshPeer(l, b, a, 64512)})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(public, a.addr)); err != nil {
		t.Fatal(err)
	}
	waitPeer(t, a.sp, b.addr, established)
	private, pool := netip.MustParsePrefix("10.82.1.0/26"), netip.MustParsePrefix("10.82.0.0/16")
	other := netip.MustParsePrefix("10.65.5.0/26")
	var failing atomic.Bool
	var refusals atomic.Int32
	failing.Store(true)
	fail := func(name string) error {
		if failing.Load() && strings.HasPrefix(name, noExportPolicy) {
			refusals.Add(1)
			return errors.New("injected failure")
		}
		return nil
	}
	a.sp.failAssign.Store(&fail)
	var added sync.Map
	hook := func(p netip.Prefix) {
		added.Store(p, true)
		if p == private {
			time.Sleep(300 * time.Millisecond) // time to reach b, if it may
		}
	}
	a.sp.pathHook.Store(&hook)
	a.sp.want.update(func() {
		a.sp.want.noExport = []netip.Prefix{pool}
		a.sp.want.blocks[private] = true
		a.sp.want.blocks[other] = true
	})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(other, a.addr)); err != nil {
		t.Fatalf("the other block of the pass never reached b while the no-export policy failed: %v", err)
	}
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if refusals.Load() >= 2 {
			return ""
		}
		return "the no-export policy was not refused twice"
	})
	if _, ok := added.Load(private); ok {
		t.Fatalf("a added %s to its RIB while its no-export policy was refused", private)
	}
	failing.Store(false)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if _, ok := added.Load(private); ok && noExportIn(a) != "" {
			return ""
		}
		return "the no-export policy and the private block were never installed"
	})
	later := netip.MustParsePrefix("10.90.9.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: later, State: AffinityConfirmed}, false)
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, a.addr)); err != nil {
		t.Fatal(err)
	}
	_, held := b.sink.Routes()[private]
	if n := b.sink.Withdrawals()[private]; held || n > 0 {
		t.Fatalf("b got a's block %s of a no-export pool (held now: %v, withdrawn %d times)", private, held, n)
	}
}

// TestNoExportResetFailureRetried: a block the peer already holds
// whose pool then gets disableBGPExport is withdrawn from the peer even
// when the soft reset after the new no-export policy fails: the reset
// is retried. Before, its error was ignored and the peer kept the now
// private block for as long as the session lasted.
func TestNoExportResetFailureRetried(t *testing.T) {
	t.Parallel()
	private := netip.MustParsePrefix("10.74.1.0/26")
	a, b := pairWithBlock(t, private)
	var failed atomic.Int32
	fail := func(peer netip.Addr) error {
		if peer == b.addr && failed.CompareAndSwap(0, 1) {
			return errors.New("injected failure")
		}
		return nil
	}
	a.sp.failReset.Store(&fail)
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.74.0.0/16")})
	if err := b.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(private)); err != nil {
		t.Fatalf("the no-export policy's soft reset failed once: b still holds the private block %s: %v (resets failed: %d)", private, err, failed.Load())
	}
	if failed.Load() != 1 {
		t.Fatal("the soft reset never failed: the test proves nothing")
	}
}
