package natout_test

import (
	"net/netip"
	"os"
	"os/exec"
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

// TestIPv6NATTable: IPv6 pools get their own "ip6 routed" table, made
// only once an IPv6 pool exists, with the same sets and rule.
func TestIPv6NATTable(t *testing.T) {
	fd, c := openNS(t)
	tbl, err := natout.New(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	tbl.SetPools([]netip.Prefix{pfx("10.244.0.0/16")}, nil)
	if err := tbl.Apply(false); err != nil {
		t.Fatal(err)
	}
	if tabs, _ := c.ListTablesOfFamily(nftables.TableFamilyIPv6); len(tabs) != 0 {
		t.Fatalf("ip6 table made without IPv6 pools: %v", tabs)
	}
	all := []netip.Prefix{pfx("10.244.0.0/16"), pfx("fd00:244::/112"), pfx("fd00:99::/64"), pfx("ffff::/16")}
	tbl.SetPools(all, []netip.Prefix{pfx("fd00:244::/112"), pfx("ffff::/16")})
	if err := tbl.Apply(false); err != nil {
		t.Fatal(err)
	}
	expect6 := func(name string, want ...netip.Prefix) {
		t.Helper()
		got, err := natout.ReadSet6(c, name)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("ip6 set %s = %v (%v), want %v", name, got, err, want)
		}
	}
	expect6(natout.AllPoolsSet, pfx("fd00:99::/64"), pfx("fd00:244::/112"), pfx("ffff::/16"))
	expect6(natout.NATPoolsSet, pfx("fd00:244::/112"), pfx("ffff::/16"))
	expectSet(t, c, natout.AllPoolsSet, pfx("10.244.0.0/16"))
	tb := &nftables.Table{Name: natout.TableName, Family: nftables.TableFamilyIPv6}
	rules, err := c.GetRules(tb, &nftables.Chain{Name: natout.ChainName, Table: tb})
	if err != nil || len(rules) != 1 {
		t.Fatalf("ip6 postrouting: want 1 rule, got %d (%v)", len(rules), err)
	}
	var lens []uint32
	for _, e := range rules[0].Exprs {
		if p, ok := e.(*expr.Payload); ok {
			lens = append(lens, p.Offset, p.Len)
		}
	}
	if !slices.Equal(lens, []uint32{8, 16, 24, 16}) {
		t.Errorf("ip6 rule matches payload (offset, len) %v, want saddr (8,16) and daddr (24,16)", lens)
	}

	// Flushed by someone: a verifying Apply restores it.
	c.FlushSet(&nftables.Set{Table: tb, Name: natout.NATPoolsSet})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := tbl.Apply(true); err != nil {
		t.Fatal(err)
	}
	expect6(natout.NATPoolsSet, pfx("fd00:244::/112"), pfx("ffff::/16"))

	if err := natout.Uninstall(fd); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []nftables.TableFamily{nftables.TableFamilyIPv4, nftables.TableFamilyIPv6} {
		if tabs, _ := c.ListTablesOfFamily(fam); len(tabs) != 0 {
			t.Errorf("tables left after Uninstall: %v", tabs)
		}
	}
}

// TestIPv6MasqueradeCarriesTraffic pings from a pool address to a host
// that has no route back to the pool: only a masqueraded ping is
// answered.
func TestIPv6MasqueradeCarriesTraffic(t *testing.T) {
	node, pod, out := nstest.New(t), nstest.New(t), nstest.New(t)
	ip := func(args ...string) {
		t.Helper()
		if b, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, b)
		}
	}
	ip("-n", node.Name, "link", "add", "topod", "type", "veth", "peer", "name", "eth0", "netns", pod.Name)
	ip("-n", node.Name, "link", "add", "toout", "type", "veth", "peer", "name", "eth0", "netns", out.Name)
	for _, x := range [][]string{
		{"-n", node.Name, "link", "set", "topod", "up"}, {"-n", node.Name, "link", "set", "toout", "up"},
		{"-n", pod.Name, "link", "set", "eth0", "up"}, {"-n", out.Name, "link", "set", "eth0", "up"},
	} {
		ip(x...)
	}
	node.AddAddr(t, "topod", "fd00:244::1/64")
	node.AddAddr(t, "toout", "2001:db8:5::1/64")
	pod.AddAddr(t, "eth0", "fd00:244::5/64")
	out.AddAddr(t, "eth0", "2001:db8:5::2/64")
	ip("-n", pod.Name, "-6", "route", "add", "default", "via", "fd00:244::1")
	node.Do(t, func() error { return os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0) })

	f, err := os.Open(node.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tbl, err := natout.New(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Close()
	tbl.SetPools([]netip.Prefix{pfx("fd00:244::/112")}, []netip.Prefix{pfx("fd00:244::/112")})
	if err := tbl.Apply(false); err != nil {
		t.Fatal(err)
	}
	ping := exec.Command("ip", "netns", "exec", pod.Name, "ping", "-6", "-c", "1", "-W", "2", "2001:db8:5::2")
	if b, err := ping.CombinedOutput(); err != nil {
		t.Fatalf("ping from the pool to outside failed (not masqueraded?): %v: %s", err, b)
	}
}
