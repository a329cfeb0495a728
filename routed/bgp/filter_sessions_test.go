//go:build !race

package bgp

import (
	"context"
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
	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/bgp/bgptest"
)

// TestFilterChangeLeavesOtherSessions: a BGPFilter added for one session
// leaves another session's filter installed as it was (before, every
// session's filter was deleted and added again, and a session coming up
// in between got its first routes unfiltered: a fresh-clone run's
// TestBGPFilterMatchesAndOperations saw it), and the filtered session
// still gets only what its filter lets through.
func TestFilterChangeLeavesOtherSessions(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, d, toC, toD := filterLab(l)
	kept, refused := netip.MustParsePrefix("10.65.1.0/26"), netip.MustParsePrefix("10.65.9.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: kept, State: AffinityConfirmed}, false)
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: refused, State: AffinityConfirmed}, false)
	rejectRefused := PeerFilters{Export: []FilterRule{{Op: "Equal", CIDR: refused}}}
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rejectRefused})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(kept, a.addr)); err != nil {
		t.Fatalf("c never got a's block: %v", err)
	}
	changed := func(peer netip.Addr) int { return logCount(logs, "BGPFilter rules of the session applied", peer) }
	if changed(c.addr) != 1 {
		t.Fatalf("c's filter was applied %d times, want once", changed(c.addr))
	}

	// d gets a filter and a session: c's filter stays as it was.
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rejectRefused, d.addr: rejectRefused})
	a.sp.SetPeers([]Peer{toC, toD})
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		if changed(d.addr) >= 1 {
			return ""
		}
		return "d's filter was never applied"
	})
	if n := changed(c.addr); n != 1 {
		var lines []string
		for _, e := range logs.AllEntries() {
			lines = append(lines, e.Message)
		}
		t.Fatalf("adding d's filter applied c's again (%d times in all): %s", n, strings.Join(lines, "; "))
	}
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(kept, a.addr)); err != nil {
		t.Fatalf("d never got a's block: %v", err)
	}
	// A block a claims now reaches each after anything a sent it before.
	later := netip.MustParsePrefix("10.65.3.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: later, State: AffinityConfirmed}, false)
	for _, n := range []*testNode{c, d} {
		if err := n.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, a.addr)); err != nil {
			t.Fatalf("%s never got a's later block: %v", n.addr, err)
		}
	}
	for _, n := range []*testNode{c, d} {
		if _, ok := n.sink.Routes()[refused]; ok {
			t.Errorf("%s got %s, which its filter rejects", n.addr, refused)
		}
	}
}

// TestFilterStaysWhileOwnPoliciesAreAdded: a peer that needs a policy of
// routed's own (keepOriginalNextHop) added after a session's filter is
// installed puts that policy before the filter (assignOwnPolicy; the
// filters' move behind routed's own, reorderFilters, is the fallback);
// the filter is not removed and added again, and still applies.
func TestFilterStaysWhileOwnPoliciesAreAdded(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, d, toC, toD := filterLab(l)
	toD.KeepOriginalNextHop = true // routed's keep-next-hop policy, made now
	kept, refused := netip.MustParsePrefix("10.66.1.0/26"), netip.MustParsePrefix("10.66.9.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: kept, State: AffinityConfirmed}, false)
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: refused, State: AffinityConfirmed}, false)
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: {Export: []FilterRule{{Op: "Equal", CIDR: refused}}}})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(kept, a.addr)); err != nil {
		t.Fatalf("c never got a's block: %v", err)
	}
	count := func(msg string) int { return logCount(logs, msg, c.addr) }
	a.sp.SetPeers([]Peer{toC, toD})
	if err := d.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(refused, a.addr)); err != nil {
		t.Fatalf("d (no filter) never got %s: %v", refused, err)
	}
	if n := count("BGPFilter rules of the session applied"); n != 1 {
		t.Fatalf("c's filter was applied %d times, want once: adding a peer with a policy of routed's own re-installed it", n)
	}
	// The keep-next-hop policy sits before the filter in the export list.
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		var names []string
		err := a.sp.srv().ListPolicyAssignment(context.Background(), &api.ListPolicyAssignmentRequest{Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_EXPORT},
			func(pa *api.PolicyAssignment) {
				for _, p := range pa.Policies {
					names = append(names, p.Name)
				}
			})
		keep := slices.Index(names, keepNHPolicy)
		filter := slices.IndexFunc(names, func(n string) bool { return strings.HasPrefix(n, filterPolicyPrefix+"export-"+c.addr.String()+"-g") })
		if err == nil && keep >= 0 && filter > keep {
			return ""
		}
		return fmt.Sprintf("global export policies %v (%v): want %s before c's filter", names, err, keepNHPolicy)
	})
	later := netip.MustParsePrefix("10.66.3.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: later, State: AffinityConfirmed}, false)
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, a.addr)); err != nil {
		t.Fatalf("c never got a's later block: %v", err)
	}
	if _, ok := c.sink.Routes()[refused]; ok {
		t.Errorf("c got %s, which its filter rejects", refused)
	}
}

// TestFilterFailureKeepsLastFilters: filters that fail to install leave
// the session's last installed ones in force (before, the old ones were
// deleted first and the session ran unfiltered), hold back a new
// session that would start without them, and hold back nothing else
// (before, no session at all was added or changed while one filter
// failed); once they install, both sessions get them.
func TestFilterFailureKeepsLastFilters(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, d, toC, toD := filterLab(l)
	e := l.speaker(5, 65002)
	toE := l.peerOf(e, 65002, PeerTypeGlobal)
	toE.LocalAddress = a.addr
	e.sp.SetPeers([]Peer{l.peerOf(a, 64512, PeerTypeGlobal)})
	kept, refused := netip.MustParsePrefix("10.67.1.0/26"), netip.MustParsePrefix("10.67.9.0/26")
	other := netip.MustParsePrefix("10.67.5.0/26")
	aff := func(p netip.Prefix, deleted bool) {
		a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: p, State: AffinityConfirmed}, deleted)
	}
	aff(kept, false)
	aff(refused, false)
	rejectRefused := PeerFilters{Export: []FilterRule{{Op: "Equal", CIDR: refused}}}
	rejectOther := PeerFilters{Export: []FilterRule{{Op: "Equal", CIDR: other}}}
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rejectRefused})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(kept, a.addr)); err != nil {
		t.Fatalf("c never got a's block: %v", err)
	}

	var failing atomic.Bool
	failing.Store(true)
	fail := func(p netip.Addr) error {
		if failing.Load() && (p == c.addr || p == d.addr) {
			return errors.New("injected failure")
		}
		return nil
	}
	a.sp.failFilter.Store(&fail)
	// c's next filters would let refused through; neither they nor d's
	// install. e has none.
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rejectOther, d.addr: rejectRefused})
	a.sp.SetPeers([]Peer{toC, toD, toE})
	if err := e.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(refused, a.addr)); err != nil {
		t.Fatalf("e (no filter) never came up while c's and d's filters failed: %v", err)
	}
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, func() string {
		if logCount(logs, "BGP session not started: its BGPFilter rules could not be installed", d.addr) > 0 {
			return ""
		}
		return "d's session was not reported held back"
	})
	// refused, withdrawn and announced again, is judged by c's last
	// installed filters: still refused. A block announced after it
	// reaches c after it.
	aff(refused, true)
	if err := e.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(refused)); err != nil {
		t.Fatal(err)
	}
	aff(refused, false)
	later := netip.MustParsePrefix("10.67.3.0/26")
	aff(later, false)
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(later, a.addr)); err != nil {
		t.Fatalf("c never got a's later block: %v", err)
	}
	if _, ok := c.sink.Routes()[refused]; ok {
		t.Fatalf("c got %s while its new filters failed to install: its last ones were not in force", refused)
	}

	// Installs work again: d comes up with its filter, c gets its new one.
	failing.Store(false)
	if err := d.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(later, a.addr)); err != nil {
		t.Fatalf("d never came up once its filter installed: %v", err)
	}
	if _, ok := d.sink.Routes()[refused]; ok {
		t.Errorf("d got %s, which its filter rejects", refused)
	}
	if err := c.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(refused, a.addr)); err != nil {
		t.Fatalf("c's new filters (which accept %s) never took over: %v", refused, err)
	}
}

// TestFilterSwapKeepsSessionsFiltered: at every change of GoBGP's
// global policy lists, each session that is up and has rules in both
// directions has exactly one filter policy assigned in each: through twenty changes of
// its rules (make-before-break; deleting the old policies first left
// it with none) and the session's removal (its filters go after it).
func TestFilterSwapKeepsSessionsFiltered(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, _, toC, toD := filterLab(l)
	kept := netip.MustParsePrefix("10.68.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: kept, State: AffinityConfirmed}, false)
	var mu sync.Mutex
	var violations []string
	checks := 0
	hook := func() { // on a's loop: a.sp.applied is its own
		lists := map[string][]string{
			"import": globalPolicies(a, api.PolicyDirection_POLICY_DIRECTION_IMPORT),
			"export": globalPolicies(a, api.PolicyDirection_POLICY_DIRECTION_EXPORT),
		}
		mu.Lock()
		defer mu.Unlock()
		checks++
		if _, up := a.sp.applied[c.addr]; !up {
			return
		}
		for dir, names := range lists {
			n := 0
			for _, name := range names {
				if strings.HasPrefix(name, filterPolicyPrefix+dir+"-"+c.addr.String()+"-g") {
					n++
				}
			}
			if n != 1 {
				violations = append(violations, fmt.Sprintf("%s %v", dir, names))
			}
		}
	}
	a.sp.assignedHook.Store(&hook)
	rules := func(i int) PeerFilters {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 68, byte(100 + i), 0}), 26)
		return PeerFilters{Import: []FilterRule{{Op: "Equal", CIDR: p}}, Export: []FilterRule{{Op: "Equal", CIDR: p}}}
	}
	applied := func() int { return logCount(logs, "BGPFilter rules of the session applied", c.addr) }
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rules(0)})
	a.sp.SetPeers([]Peer{toC, toD})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(kept, a.addr)); err != nil {
		t.Fatalf("c never got a's block: %v", err)
	}
	for i := 1; i <= 20; i++ {
		a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rules(i)})
		testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
			if applied() > i {
				return ""
			}
			return fmt.Sprintf("change %d of c's rules not applied", i)
		})
	}
	// c goes, and its filters with it; d stays.
	a.sp.SetFilters(nil)
	a.sp.SetPeers([]Peer{toD})
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() string {
		if logCount(logs, "BGPFilter rules of the session removed", c.addr) > 0 {
			return ""
		}
		return "c's filters were not removed"
	})
	mu.Lock()
	defer mu.Unlock()
	if checks < 21 {
		t.Fatalf("the global lists changed %d times, want at least 21: the check saw too little", checks)
	}
	if len(violations) > 0 {
		t.Fatalf("%d of %d changes left up session c without exactly one filter in a direction, e.g. %s", len(violations), checks, violations[0])
	}
}

// TestFilterHalfSwapIsUndone: a swap that fails after one direction's
// list was changed is undone, or, when undoing fails too, what GoBGP
// then holds is recorded and replaced whole next time. Either way the
// next reconcile installs the new filters, and GoBGP ends with exactly
// the session's two policies (before, the new import policy was
// deleted while still assigned, and every later change failed on it).
func TestFilterHalfSwapIsUndone(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, _, toC, _ := filterLab(l)
	kept, refused := netip.MustParsePrefix("10.69.1.0/26"), netip.MustParsePrefix("10.69.9.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: kept, State: AffinityConfirmed}, false)
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: refused, State: AffinityConfirmed}, false)
	rules := func(i int, reject netip.Prefix) PeerFilters {
		return PeerFilters{
			Import: []FilterRule{{Op: "Equal", CIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 69, byte(100 + i), 0}), 26)}},
			Export: []FilterRule{{Op: "Equal", CIDR: reject}},
		}
	}
	applied := func() int { return logCount(logs, "BGPFilter rules of the session applied", c.addr) }
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rules(0, refused)})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(kept, a.addr)); err != nil {
		t.Fatalf("c never got a's block: %v", err)
	}
	// fails lists, in order, which calls of swapPolicy fail (1: the
	// first after it is set).
	run := func(phase string, i int, reject netip.Prefix, fails ...int) {
		t.Helper()
		var calls atomic.Int32
		f := func(api.PolicyDirection) error {
			if slices.Contains(fails, int(calls.Add(1))) {
				return errors.New("injected failure")
			}
			return nil
		}
		a.sp.failSwap.Store(&f)
		before := applied()
		a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rules(i, reject)})
		testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() string {
			if applied() > before {
				return ""
			}
			return phase + ": the new filters were never applied"
		})
		if int(calls.Load()) <= slices.Max(fails) {
			t.Fatalf("%s: %d swaps, the injected failures were not all met", phase, calls.Load())
		}
		var policies []string
		_ = a.sp.srv().ListPolicy(context.Background(), &api.ListPolicyRequest{}, func(p *api.Policy) {
			if strings.HasPrefix(p.Name, filterPolicyPrefix) {
				policies = append(policies, p.Name)
			}
		})
		assigned := assignedFilters(a)
		slices.Sort(policies)
		if len(policies) != 2 || !slices.Equal(policies, assigned) {
			t.Fatalf("%s: GoBGP holds filter policies %v, the lists name %v: want the session's two, both assigned", phase, policies, assigned)
		}
		if sets := filterSets(t, a); len(sets) != 4 || slices.ContainsFunc(sets, func(n string) bool {
			return !strings.HasPrefix(n, policies[0]) && !strings.HasPrefix(n, policies[1])
		}) {
			t.Fatalf("%s: GoBGP holds filter sets %v: want the two policies' own four", phase, sets)
		}
	}
	assignedNow := func() []string { return assignedFilters(a) }
	// Every export swap fails: each attempt's import swap is undone,
	// and the lists keep naming the policies in force before.
	first := assignedNow()
	exportFails := func(dir api.PolicyDirection) error {
		if dir == api.PolicyDirection_POLICY_DIRECTION_EXPORT {
			return errors.New("injected failure")
		}
		return nil
	}
	a.sp.failSwap.Store(&exportFails)
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rules(9, refused)})
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		if strings.Contains(lastWarning(logs), "injected failure") {
			return ""
		}
		return "the export swap never failed"
	})
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		now := assignedNow()
		if slices.Equal(now, first) && len(filterSets(t, a)) == 4 {
			return ""
		}
		return fmt.Sprintf("the lists name %v and GoBGP holds filter sets %v after failed swaps, want the policies before them %v and their four sets", now, filterSets(t, a), first)
	})
	// The export swap fails once: the import swap is undone.
	run("undone", 1, refused, 2)
	// The export swap fails, and so does undoing the import swap.
	run("not undone", 2, refused, 2, 3)
	// And the filter in force is the newest: refused passes now.
	a.sp.failSwap.Store(nil)
	before := applied()
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: rules(3, netip.MustParsePrefix("10.69.200.0/26"))})
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		if applied() > before {
			return ""
		}
		return "the last filters were never applied"
	})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(refused, a.addr)); err != nil {
		t.Fatalf("c never got %s once its filter stopped rejecting it: %v", refused, err)
	}
}

// TestFilterIfaceErrorKeepsOwnPoliciesFirst: while the interfaces
// cannot be read, the filters stay as they are, but a policy of
// routed's own added meanwhile (here the no-export one) still goes
// before them: a BGPFilter Accept does not export a private pool
// (before c2c1c67, the filters were not moved and their Accept won). A session
// not up yet whose rules name an interface is held back meanwhile (its
// filters were installed when the interface had no subnet: the same
// key as no subnet read) and starts once the interfaces can be read.
func TestFilterIfaceErrorKeepsOwnPoliciesFirst(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, d, toC, toD := filterLab(l)
	private, public := netip.MustParsePrefix("10.70.1.0/26"), netip.MustParsePrefix("10.71.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: private, State: AffinityConfirmed}, false)
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: public, State: AffinityConfirmed}, false)
	byIface := []FilterRule{{Op: "In", CIDR: netip.MustParsePrefix("10.99.0.0/16"), Interface: "zzq*"}}
	a.sp.SetFilters(map[netip.Addr]PeerFilters{
		c.addr: {Import: byIface, Export: []FilterRule{{Accept: true, Op: "In", CIDR: netip.MustParsePrefix("10.70.0.0/16")}}},
		d.addr: {Import: byIface},
	})
	a.sp.SetPeers([]Peer{toC})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Has(private, a.addr)); err != nil {
		t.Fatalf("c never got a's block: %v", err)
	}
	a.sp.failIfaces.Store(true)
	a.sp.SetNoExportCIDRs([]netip.Prefix{netip.MustParsePrefix("10.70.0.0/16")})
	if err := c.sink.WaitFor(ctxT(t, 20*time.Second), bgptest.Lacks(private)); err != nil {
		t.Fatalf("c kept the private pool's block while the interfaces could not be read: %v", err)
	}
	a.sp.SetPeers([]Peer{toC, toD})
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() string {
		if logCount(logs, "BGP session not started: its BGPFilter rules could not be installed", d.addr) > 0 {
			return ""
		}
		return "d, whose rules name an interface, was not held back while the interfaces could not be read"
	})
	a.sp.failIfaces.Store(false)
	if err := d.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(public, a.addr)); err != nil {
		t.Fatalf("d never came up once the interfaces could be read: %v", err)
	}
}

// lastWarning is the message and error of the last warning logged.
func lastWarning(logs *test.Hook) string {
	out := ""
	for _, e := range logs.AllEntries() {
		if e.Level == logrus.WarnLevel {
			out = fmt.Sprintf("%s %v", e.Message, e.Data[logrus.ErrorKey])
		}
	}
	return out
}

// assignedFilters lists, sorted, the BGPFilter policies n's global
// import and export lists name.
func assignedFilters(n *testNode) []string {
	var out []string
	for _, dir := range filterDirs {
		for _, name := range globalPolicies(n, dir) {
			if strings.HasPrefix(name, filterPolicyPrefix) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// globalPolicies lists, in order, the policies of n's global list of
// dir.
func globalPolicies(n *testNode, dir api.PolicyDirection) []string {
	var out []string
	_ = n.sp.srv().ListPolicyAssignment(context.Background(), &api.ListPolicyAssignmentRequest{Name: "global", Direction: dir},
		func(pa *api.PolicyAssignment) {
			for _, p := range pa.Policies {
				out = append(out, p.Name)
			}
		})
	return out
}

// filterSets lists the defined sets (neighbor and prefix) GoBGP holds
// for BGPFilter policies.
func filterSets(t *testing.T, n *testNode) []string {
	t.Helper()
	var out []string
	for _, dt := range []api.DefinedType{api.DefinedType_DEFINED_TYPE_NEIGHBOR, api.DefinedType_DEFINED_TYPE_PREFIX} {
		err := n.sp.srv().ListDefinedSet(context.Background(), &api.ListDefinedSetRequest{DefinedType: dt}, func(d *api.DefinedSet) {
			if strings.HasPrefix(d.Name, filterPolicyPrefix) {
				out = append(out, d.Name)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// logCount counts the entries logged with msg for peer.
func logCount(logs *test.Hook, msg string, peer netip.Addr) int {
	n := 0
	for _, e := range logs.AllEntries() {
		if e.Message == msg && e.Data["peer"] == peer.String() {
			n++
		}
	}
	return n
}

// filterLab is speaker a (AS 64512, its log kept) with eBGP peers c and
// d (AS 65000, 65001) that peer with it, and a's sessions to them (not
// set yet).
func filterLab(l *loopLab) (a *testNode, logs *test.Hook, c, d *testNode, toC, toD Peer) {
	a = l.speakerWith(1, 64512, func(cfg *Config) {
		logger, h := test.NewNullLogger()
		logger.SetLevel(logrus.InfoLevel)
		cfg.Log, logs = logger.WithField("node", 1), h
	})
	c, d = l.speaker(3, 65000), l.speaker(4, 65001)
	toC, toD = l.peerOf(c, 65000, PeerTypeGlobal), l.peerOf(d, 65001, PeerTypeGlobal)
	toC.LocalAddress, toD.LocalAddress = a.addr, a.addr
	c.sp.SetPeers([]Peer{l.peerOf(a, 64512, PeerTypeGlobal)})
	d.sp.SetPeers([]Peer{l.peerOf(a, 64512, PeerTypeGlobal)})
	return a, logs, c, d, toC, toD
}

// TestOwnPolicyAssignFailureRetried: when GoBGP refuses to put one of
// routed's own policies in its global list (after the policy was
// added), the next pass installs it all the same: here the
// no-advertise export policy and the keep-next-hop one, each refused
// once. Before, the policy stayed in GoBGP unassigned and every later
// pass failed on "statement ... already defined": the steps after it
// were never applied and the new session never came up, until a
// restart. At the end each policy is in the export list once, before
// the filter, no pass failed on a leftover, and one pass failed in all
// (a refused step no longer keeps the next steps out of its pass).
func TestOwnPolicyAssignFailureRetried(t *testing.T) {
	t.Parallel()
	l := newLoopLab(t)
	a, logs, c, d, toC, toD := filterLab(l)
	block := netip.MustParsePrefix("10.74.1.0/26")
	a.sp.OnAffinityUpdate(Affinity{Node: "node1", CIDR: block, State: AffinityConfirmed}, false)
	var mu sync.Mutex
	refused := map[string]int{}
	fail := func(name string) error {
		mu.Lock()
		defer mu.Unlock()
		if (name == noAdvertisePolicy || name == keepNHPolicy) && refused[name] == 0 {
			refused[name]++
			return errors.New("injected failure")
		}
		return nil
	}
	a.sp.failAssign.Store(&fail)
	a.sp.SetFilters(map[netip.Addr]PeerFilters{c.addr: {Export: []FilterRule{{Accept: true, Op: "In", CIDR: netip.MustParsePrefix("10.64.0.0/10")}}}})
	toD.KeepOriginalNextHop = true
	a.sp.SetPeers([]Peer{toC, toD})
	for _, n := range []*testNode{c, d} {
		if err := n.sink.WaitFor(ctxT(t, 30*time.Second), bgptest.Has(block, a.addr)); err != nil {
			t.Fatalf("%s never got a's block after a refused assignment (last warning: %s): %v", n.addr, lastWarning(logs), err)
		}
	}
	mu.Lock()
	if refused[noAdvertisePolicy] != 1 || refused[keepNHPolicy] != 1 {
		t.Fatalf("refusals %v: the injected failures were not all met", refused)
	}
	mu.Unlock()
	names := globalPolicies(a, api.PolicyDirection_POLICY_DIRECTION_EXPORT)
	for _, own := range []string{noAdvertisePolicy, keepNHPolicy} {
		i := slices.Index(names, own)
		if i < 0 || slices.Index(names[i+1:], own) >= 0 {
			t.Fatalf("export list %v: want %s once", names, own)
		}
		if f := slices.IndexFunc(names, func(n string) bool { return strings.HasPrefix(n, filterPolicyPrefix) }); f >= 0 && f < i {
			t.Fatalf("export list %v: %s behind a filter", names, own)
		}
	}
	failed := 0
	for _, e := range logs.AllEntries() {
		err, _ := e.Data[logrus.ErrorKey].(error)
		if err != nil && strings.Contains(err.Error(), "already") {
			t.Fatalf("a pass failed on what a refused assignment left: %s: %v", e.Message, err)
		}
		if e.Message == "programming BGP failed" {
			failed++
		}
	}
	// Both were refused in the same pass: the one refused first did
	// not keep the other out of it.
	if failed != 1 {
		t.Fatalf("%d passes failed, want 1", failed)
	}
}

// TestFilterRejectWithItsBlock: one pass that brings a BGPFilter export
// Reject for a peer together with a new block it rejects (confd's
// filters and the IPAM watch both landed before the loop ran) never
// sends that block to the peer, not even for a moment: the filter is in
// place before the block's path enters GoBGP's RIB. Before, the paths
// were added first (GoBGP advertised the block to the established
// session at once) and the filter's soft reset withdrew it after. A
// block announced after that pass reaches the peer; the peer never held
// the rejected block (nor had it withdrawn).
func TestFilterRejectWithItsBlock(t *testing.T) {
	t.Parallel()
	a, b := pairWithBlock(t, netip.MustParsePrefix("10.66.1.0/26"))
	rejectedInOnePass(t, a, b, "export filter", filterPolicies, func(rejected netip.Prefix) {
		a.sp.want.filters = map[netip.Addr]PeerFilters{b.addr: {Export: []FilterRule{{Op: "Equal", CIDR: rejected}}}}
	})
}

// filterPolicies is the BGPFilter policies in n's global export list,
// joined ("" for none).
func filterPolicies(n *testNode) string {
	var out []string
	for _, name := range globalPolicies(n, exportDir) {
		if strings.HasPrefix(name, filterPolicyPrefix) {
			out = append(out, name)
		}
	}
	return strings.Join(out, ",")
}
