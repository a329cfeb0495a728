package nftdp_test

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// kernelSet reads a set's interval flag and element count as the kernel
// has it in the family's table.
func kernelSet(t *testing.T, n *polab.Node, fam nftables.TableFamily, name string) (interval bool, elems int) {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(n.Fd))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	s, err := c.GetSetByName(&nftables.Table{Name: nftdp.DefaultTable, Family: fam}, name)
	if err != nil {
		t.Fatalf("set %s: %v", name, err)
	}
	els, err := c.GetSetElements(s)
	if err != nil {
		t.Fatal(err)
	}
	return s.Interval, len(els)
}

// setChains dispatches iface's ingress to a chain that drops UDP from
// outside set s-src and jumps to one that accepts TCP from it: two
// chains use the set, so both must be refilled when it is remade.
func setChains(d *nftdp.Dataplane, iface string) {
	d.SetChain("pol", []nftdp.Rule{{ID: "pol/0", Proto: 6, Src: nftdp.Side{Sets: []string{"s-src"}}, Counter: true, Action: nftdp.ActAccept}})
	d.SetChain("tw-b", []nftdp.Rule{
		{Src: nftdp.Side{NotSets: []string{"s-src"}}, Proto: 17, Action: nftdp.ActDrop},
		{Action: nftdp.ActJump, Target: "pol"},
		{ID: "b/end", Counter: true, Action: nftdp.ActDrop},
	})
	d.SetEndpoint(iface, "allow-all", "tw-b", nftdp.BothFamilies)
}

// TestAddrSetFlavour: an address set of single addresses is a plain hash
// set in the kernel; a net makes it an interval set in that family's
// table only, and its going makes it a hash set again. Each switch is
// one transaction (the set is made anew under its name and the rules
// using it are refilled with it), verdicts follow with real traffic in
// both families, and a resync afterwards writes nothing. A table left
// by an older felix (an interval set of single addresses) is put right
// by a resync.
func TestAddrSetFlavour(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-a", "10.66.0.1", "fd00:66::1")
	b := node.AddPod(t, "cali-b", "10.66.0.2", "fd00:66::2")
	c := node.AddPod(t, "cali-c", "10.66.0.3", "fd00:66::3")
	polab.Serve(t, b.NS, 8080)

	d := newDP(t, node)
	allowAll(d, a.Iface)
	allowAll(d, c.Iface)
	d.AddSet("s-src", nftdp.AddrSet)
	for _, p := range []netip.Addr{a.IPv4, a.IPv6} {
		d.AddMember("s-src", nftdp.Member{Prefix: host(p)})
	}
	setChains(d, b.Iface)
	apply(t, d)

	type want struct {
		interval [2]bool // ip, ip6
		a        bool    // a reaches b (both families)
		c        [2]bool // c reaches b over IPv4, IPv6
	}
	check := func(step string, w want) {
		t.Helper()
		for i, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
			if got, _ := kernelSet(t, node, fam, "s-src"); got != w.interval[i] {
				t.Errorf("%s: family %d: interval %v, want %v", step, fam, got, w.interval[i])
			}
		}
		for i, v6 := range []bool{false, true} {
			polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, w.a, step+": a to b")
			polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, w.c[i], step+": c to b")
		}
		wr := d.Writes()
		if err := d.Resync(); err != nil {
			t.Fatal(err)
		}
		if d.Writes() != wr {
			t.Errorf("%s: resync made %d writes", step, d.Writes()-wr)
		}
	}
	check("single addresses", want{a: true})

	// A net covering c, IPv4 only: the ip table's set becomes an
	// interval set, in one transaction per family at most.
	w := d.Writes()
	d.AddMember("s-src", nftdp.Member{Prefix: netip.MustParsePrefix("10.66.0.2/31")})
	apply(t, d)
	if d.Writes()-w != 1 {
		t.Errorf("adding a net took %d transactions, want 1 (ip only)", d.Writes()-w)
	}
	check("IPv4 net", want{interval: [2]bool{true, false}, a: true, c: [2]bool{true, false}})

	// An IPv6 net too, then both nets go: back to hash sets.
	d.AddMember("s-src", nftdp.Member{Prefix: netip.MustParsePrefix("fd00:66::/125")})
	apply(t, d)
	check("both nets", want{interval: [2]bool{true, true}, a: true, c: [2]bool{true, true}})
	d.RemoveMember("s-src", nftdp.Member{Prefix: netip.MustParsePrefix("10.66.0.2/31")})
	d.RemoveMember("s-src", nftdp.Member{Prefix: netip.MustParsePrefix("fd00:66::/125")})
	apply(t, d)
	check("nets gone", want{a: true})

	// An older felix's table: the same chains over an interval set of
	// single addresses. A new process's first Apply reads it back and
	// makes the set a hash set, keeping the verdicts.
	old := newDP(t, node)
	allowAll(old, a.Iface)
	allowAll(old, c.Iface)
	old.AddSet("s-src", nftdp.AddrSet)
	old.AddMember("s-src", nftdp.Member{Prefix: host(a.IPv4)})
	old.AddMember("s-src", nftdp.Member{Prefix: netip.MustParsePrefix("10.99.0.0/16")}) // forces interval
	setChains(old, b.Iface)
	apply(t, old)
	if iv, _ := kernelSet(t, node, nftables.TableFamilyIPv4, "s-src"); !iv {
		t.Fatal("setup: the old table's set is not an interval set")
	}
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if iv, n := kernelSet(t, node, nftables.TableFamilyIPv4, "s-src"); iv || n != 1 {
		t.Errorf("after resync: interval %v, %d elements; want a hash set of a's address", iv, n)
	}
	check("resync over an older table", want{a: true})
}
