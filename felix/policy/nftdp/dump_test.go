package nftdp

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"

	"github.com/routed-net/routed/felix/policy/internal/polab"
)

// libraryRules reads a table the slow way, a GetRules per chain with
// every expression decoded, as this package did before its one dump.
func libraryRules(t *testing.T, c *nftables.Conn, fam nftables.TableFamily, table string) map[string][]ruleSummary {
	t.Helper()
	chains, err := c.ListChainsOfTableFamily(fam)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]ruleSummary{}
	tb := &nftables.Table{Name: table, Family: fam}
	for _, ch := range chains {
		if ch.Table.Name != table {
			continue
		}
		rules, err := c.GetRules(tb, ch)
		if err != nil {
			t.Fatal(err)
		}
		out[ch.Name] = []ruleSummary{}
		for _, r := range rules {
			s := ruleSummary{chain: ch.Name, handle: r.Handle}
			s.comment, _ = userdata.GetString(r.UserData, userdata.TypeComment)
			for _, e := range r.Exprs {
				if cnt, ok := e.(*expr.Counter); ok {
					s.counter.Packets += cnt.Packets
					s.counter.Bytes += cnt.Bytes
					s.counted = true
				}
			}
			out[ch.Name] = append(out[ch.Name], s)
		}
	}
	return out
}

// dumpedRules groups one dump of the table by chain.
func dumpedRules(t *testing.T, d *Dataplane, fam nftables.TableFamily) map[string][]ruleSummary {
	t.Helper()
	rules, err := d.dump.rules(fam, d.cfg.Table)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]ruleSummary{}
	for _, r := range rules {
		out[r.chain] = append(out[r.chain], r)
	}
	return out
}

// TestOneDumpReadsWhatGetRulesReads: the table-wide dump gives, chain by
// chain and in order, the handles, comments and counters the library's
// per-chain GetRules decodes, in both families, after real traffic hit
// the counters; a foreign table's rules stay out of it. Then drift
// (one of our rules deleted, a foreign rule put into our chain, in
// different families) is found by a Resync, which corrects it with one
// transaction per drifted family (the probe's verdict follows), and the
// Resync after that writes nothing.
func TestOneDumpReadsWhatGetRulesReads(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-da", "10.67.0.1", "fd00:67::1")
	b := node.AddPod(t, "cali-db", "10.67.0.2", "fd00:67::2")
	polab.Serve(t, b.NS, 8080)
	polab.Serve(t, b.NS, 9090)

	conn, err := nftables.New(nftables.WithNetNSFd(node.Fd))
	if err != nil {
		t.Fatal(err)
	}
	ForeignCountingTable(t, conn, "foreign")

	d, err := New(Config{NetnsFd: node.Fd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	host := func(a netip.Addr) Member { return Member{Prefix: netip.PrefixFrom(a, a.BitLen())} }
	d.AddSet("s-a", AddrSet)
	d.AddMember("s-a", host(a.IPv4))
	d.AddMember("s-a", host(a.IPv6))
	d.SetChain("allow-all", []Rule{{Action: ActAccept}})
	d.SetChain("empty", nil)
	d.SetChain("pol", []Rule{
		{ID: "pol/0", Proto: 6, Src: Side{Sets: []string{"s-a"}}, Dst: Side{Ports: []PortRange{{8080, 8080}}}, Counter: true, Action: ActAccept},
		{ID: "pol/1", IPVersion: 4, Proto: 17, Counter: true, Action: ActAccept},
	})
	d.SetChain("tw-b", []Rule{
		{Action: ActJump, Target: "empty"},
		{Action: ActJump, Target: "pol"},
		{ID: "b/end", Counter: true, Action: ActDrop},
	})
	d.SetEndpoint(a.Iface, "allow-all", "allow-all", BothFamilies)
	d.SetEndpoint(b.Iface, "allow-all", "tw-b", BothFamilies)
	if err := d.Apply(); err != nil {
		t.Fatal(err)
	}
	for _, v6 := range []bool{false, true} {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, true, "a to b's 8080")
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 9090}, false, "a to b's 9090")
	}

	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		want := libraryRules(t, conn, fam, DefaultTable)
		got := dumpedRules(t, d, fam)
		for ch, rs := range want {
			if !slices.Equal(got[ch], rs) {
				t.Errorf("family %d chain %s: dump %+v, GetRules %+v", fam, ch, got[ch], rs)
			}
		}
		for ch := range got {
			if _, ok := want[ch]; !ok {
				t.Errorf("family %d: dump has rules of chain %s, which is not in the table", fam, ch)
			}
		}
		if r := want["pol"]; len(r) == 0 || r[0].counter.Packets == 0 {
			t.Errorf("family %d: pol/0 counted no packets: %+v", fam, r)
		}
	}
	cs, err := d.Counters(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cs["pol/0"].Packets < 2 || cs["b/end"].Packets < 2 {
		t.Errorf("counters summed over both families: %+v", cs)
	}
	if _, ok := cs["pol/1"]; !ok {
		t.Errorf("pol/1 (a counted rule without hits) missing from %+v", cs)
	}

	// Drift: pol/0 deleted from the IPv4 table, a foreign accept-all put
	// first in the IPv6 table's tw-b.
	v4 := want4(t, conn)
	if err := conn.DelRule(&nftables.Rule{Table: &nftables.Table{Name: DefaultTable, Family: nftables.TableFamilyIPv4},
		Chain: &nftables.Chain{Name: "pol"}, Handle: v4.handle}); err != nil {
		t.Fatal(err)
	}
	t6 := &nftables.Table{Name: DefaultTable, Family: nftables.TableFamilyIPv6}
	conn.InsertRule(&nftables.Rule{Table: t6, Chain: &nftables.Chain{Name: "tw-b", Table: t6},
		Exprs: []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, false, "pol/0 gone from the IPv4 table")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 9090}, true, "foreign accept in the IPv6 tw-b")

	w := d.Writes()
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if n := d.Writes() - w; n != 2 {
		t.Errorf("resync of two drifted families made %d writes, want 2", n)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, true, "pol/0 restored")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 9090}, false, "foreign rule gone")
	w = d.Writes()
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if n := d.Writes() - w; n != 0 {
		t.Errorf("resync after the correction made %d writes", n)
	}

	// A missing table dumps as no rules, not an error.
	if rs, err := d.dump.rules(nftables.TableFamilyIPv4, "no-such-table"); err != nil || len(rs) != 0 {
		t.Errorf("missing table: %d rules, %v", len(rs), err)
	}
}

// ForeignCountingTable adds an IPv4 table of someone else's with one
// counting rule on the forward hook (for the tests of this package).
func ForeignCountingTable(t testing.TB, conn *nftables.Conn, name string) (*nftables.Table, *nftables.Chain) {
	t.Helper()
	ft := conn.AddTable(&nftables.Table{Name: name, Family: nftables.TableFamilyIPv4})
	fc := conn.AddChain(&nftables.Chain{Name: "forward", Table: ft, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter})
	conn.AddRule(&nftables.Rule{Table: ft, Chain: fc, Exprs: []expr.Any{&expr.Counter{}}})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	return ft, fc
}

// want4 finds pol/0 in the IPv4 table.
func want4(t *testing.T, c *nftables.Conn) ruleSummary {
	t.Helper()
	for _, r := range libraryRules(t, c, nftables.TableFamilyIPv4, DefaultTable)["pol"] {
		if ruleID(r.comment) == "pol/0" {
			return r
		}
	}
	t.Fatal("pol/0 not in the IPv4 table")
	return ruleSummary{}
}
