package natout_test

import (
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/felix/natout"
)

var pfx = netip.MustParsePrefix

func openNS(t *testing.T) (int, *nftables.Conn) {
	n := nstest.New(t)
	f, err := os.Open(n.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return int(f.Fd()), c
}

func expectSet(t *testing.T, c *nftables.Conn, name string, want ...netip.Prefix) {
	t.Helper()
	got, err := natout.ReadSet(c, name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("set %s = %v, want %v", name, got, want)
	}
}

func TestNATTableFollowsPools(t *testing.T) {
	fd, c := openNS(t)
	tbl, err := natout.New(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	tbl.SetPools([]netip.Prefix{pfx("10.244.0.0/16"), pfx("192.168.128.0/18")}, []netip.Prefix{pfx("10.244.0.0/16")})
	if err := tbl.Apply(false); err != nil {
		t.Fatal(err)
	}
	expectSet(t, c, natout.AllPoolsSet, pfx("10.244.0.0/16"), pfx("192.168.128.0/18"))
	expectSet(t, c, natout.NATPoolsSet, pfx("10.244.0.0/16"))

	tb := &nftables.Table{Name: natout.TableName, Family: nftables.TableFamilyIPv4}
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyIPv4)
	if err != nil {
		t.Fatal(err)
	}
	var ch *nftables.Chain
	for _, x := range chains {
		if x.Table.Name == natout.TableName && x.Name == natout.ChainName {
			ch = x
		}
	}
	if ch == nil || ch.Type != nftables.ChainTypeNAT || *ch.Hooknum != *nftables.ChainHookPostrouting {
		t.Fatalf("postrouting nat chain missing or wrong: %+v", ch)
	}
	rules, err := c.GetRules(tb, ch)
	if err != nil || len(rules) != 1 {
		t.Fatalf("want 1 rule, got %d (%v)", len(rules), err)
	}
	var lookups []string
	for _, e := range rules[0].Exprs {
		if l, ok := e.(*expr.Lookup); ok {
			lookups = append(lookups, l.SetName)
			if l.SetName == natout.AllPoolsSet && !l.Invert {
				t.Error("daddr lookup in all-pools must be inverted")
			}
		}
	}
	if !slices.Equal(lookups, []string{natout.NATPoolsSet, natout.AllPoolsSet}) {
		t.Errorf("rule lookups = %v", lookups)
	}
	if _, ok := rules[0].Exprs[len(rules[0].Exprs)-1].(*expr.Masq); !ok {
		t.Error("rule does not end in masquerade")
	}

	// Pools change: the sets follow.
	tbl.SetPools([]netip.Prefix{pfx("10.244.0.0/16"), pfx("10.96.0.0/24")}, []netip.Prefix{pfx("10.96.0.0/24"), pfx("10.244.0.0/16")})
	if err := tbl.Apply(false); err != nil {
		t.Fatal(err)
	}
	expectSet(t, c, natout.AllPoolsSet, pfx("10.96.0.0/24"), pfx("10.244.0.0/16"))
	expectSet(t, c, natout.NATPoolsSet, pfx("10.96.0.0/24"), pfx("10.244.0.0/16"))

	// Someone deletes the table: a verifying Apply puts it back.
	if err := natout.Uninstall(fd); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Apply(true); err != nil {
		t.Fatal(err)
	}
	expectSet(t, c, natout.NATPoolsSet, pfx("10.96.0.0/24"), pfx("10.244.0.0/16"))

	// No NAT pools left: the set empties, the table stays.
	tbl.SetPools([]netip.Prefix{pfx("10.244.0.0/16")}, nil)
	if err := tbl.Apply(false); err != nil {
		t.Fatal(err)
	}
	expectSet(t, c, natout.NATPoolsSet)

	if err := natout.Uninstall(fd); err != nil {
		t.Fatal(err)
	}
	if tabs, _ := c.ListTablesOfFamily(nftables.TableFamilyIPv4); len(tabs) != 0 {
		t.Errorf("tables left after Uninstall: %v", tabs)
	}
	if err := natout.Uninstall(fd); err != nil {
		t.Errorf("second Uninstall: %v", err)
	}
}
