package nftdp_test

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/routed-net/routed/felix/natout"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// TestNftListsEveryRule: with every shape of rule and set routed writes
// programmed (pods' policy, host endpoints in every context, NAT
// outgoing), the distribution's own nft lists the whole ruleset (exit
// 0) and prints each chain; an operator debugging a node reads routed's
// tables, kube-proxy's and their own with the tool they have.
func TestNftListsEveryRule(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-nl1", "10.66.0.1", "fd00:66::1")
	d := newDP(t, node)

	// felix/natout's tables, which a node with NAT outgoing has too.
	nat, err := natout.New(node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nat.Close() })
	nat.SetPools([]netip.Prefix{netip.MustParsePrefix("10.66.0.0/16")}, []netip.Prefix{netip.MustParsePrefix("10.66.0.0/16")})
	if err := nat.Apply(false); err != nil {
		t.Fatal(err)
	}

	d.AddSet("s-addrs", nftdp.AddrSet)
	d.AddMember("s-addrs", nftdp.Member{Prefix: host(a.IPv4)})
	d.AddMember("s-addrs", nftdp.Member{Prefix: host(a.IPv6)})
	d.AddSet("s-nets", nftdp.AddrSet)
	d.AddMember("s-nets", nftdp.Member{Prefix: netip.MustParsePrefix("10.67.0.0/16")})
	d.AddMember("s-nets", nftdp.Member{Prefix: netip.MustParsePrefix("fd00:67::/64")})
	d.AddSet("n-http", nftdp.NamedPortSet)
	d.AddMember("n-http", nftdp.Member{Prefix: host(a.IPv4), Proto: 6, Port: 8080})
	d.AddMember("n-http", nftdp.Member{Prefix: host(a.IPv6), Proto: 6, Port: 8080})
	d.AddSet("n-dns", nftdp.NamedPortSet)
	d.AddMember("n-dns", nftdp.Member{Prefix: host(a.IPv4), Proto: 17, Port: 53})

	nets := []netip.Prefix{netip.MustParsePrefix("10.68.0.0/16"), netip.MustParsePrefix("10.69.1.0/24"), netip.MustParsePrefix("fd00:68::/64")}
	rules := []nftdp.Rule{
		{ID: "t/p/ingress/0", Proto: 6, Src: nftdp.Side{Sets: []string{"s-addrs"}}, Dst: nftdp.Side{Ports: []nftdp.PortRange{{First: 80, Last: 80}}}, Counter: true, Action: nftdp.ActAccept},
		{ID: "t/p/ingress/1", Proto: 6, Src: nftdp.Side{NotSets: []string{"s-nets"}}, Dst: nftdp.Side{Ports: []nftdp.PortRange{{First: 1000, Last: 2000}, {First: 3000, Last: 3000}}}, Counter: true, Action: nftdp.ActDrop},
		{ID: "t/p/ingress/2", Proto: 6, Dst: nftdp.Side{NamedPortSet: "n-http"}, Counter: true, Action: nftdp.ActAccept},
		{ID: "t/p/ingress/3", Proto: 17, Src: nftdp.Side{NotNamedPortSets: []string{"n-dns", "n-http"}}, Counter: true, Action: nftdp.ActDrop},
		{ID: "t/p/ingress/4", Src: nftdp.Side{Nets: nets, NotPorts: []nftdp.PortRange{{First: 22, Last: 22}}}, Proto: 17, Counter: true, Action: nftdp.ActPass},
		{ID: "t/p/ingress/5", Src: nftdp.Side{Nets: nets[:1], NotNets: nets[1:2]}, Counter: true, Action: nftdp.ActLog, LogPrefix: "routed test", LogGroup: 7, LogRate: 10},
		{ID: "t/p/ingress/6", ICMP: &nftdp.ICMPMatch{Type: 8, Code: 0}, Counter: true, Action: nftdp.ActAccept},
		{ID: "t/p/ingress/7", NotICMP: &nftdp.ICMPMatch{Type: 3, Code: -1}, IPVersion: 4, Counter: true, Action: nftdp.ActDrop},
		{ID: "t/p/ingress/8", NotProto: 6, IfPassClear: true, CtState: expr.CtStateBitNEW, Counter: true, Action: nftdp.ActNone},
		{ID: "t/p/ingress/9", IfPassSet: true, Action: nftdp.ActClearPass},
		// Verdicts that also log (flow marks): through tail chains.
		{ID: "t/p/ingress/10", Proto: 17, Counter: true, Action: nftdp.ActPass, LogGroup: 8, LogRate: 100, LogPrefix: "F tok10"},
		{ID: "t/p/ingress/11", Src: nftdp.Side{Sets: []string{"s-nets"}}, Counter: true, Action: nftdp.ActDrop, LogGroup: 8, LogRate: 100, LogPrefix: "F tok11"},
		{ID: "t/p/ingress/12", Proto: 6, Counter: true, Action: nftdp.ActReturn, LogGroup: 8, LogRate: 100, LogPrefix: "F tok12"},
		{Action: nftdp.ActReturn},
	}
	if err := d.SetChain("ep-nl", rules); err != nil {
		t.Fatal(err)
	}
	d.SetEndpoint(a.Iface, "ep-nl", "ep-nl", nftdp.BothFamilies)

	// Host endpoints: a named interface in every context (doNotTrack's
	// notrack in raw, preDNAT, forwarded) and the wildcard, with failsafes.
	hostRules := func(id string) []nftdp.Rule {
		return []nftdp.Rule{
			{ID: id + "/0", Proto: 6, Dst: nftdp.Side{Ports: []nftdp.PortRange{{First: 22, Last: 22}}}, Counter: true, Action: nftdp.ActAccept},
			{ID: id + "/1", Src: nftdp.Side{Sets: []string{"s-addrs"}}, Counter: true, Action: nftdp.ActDrop},
		}
	}
	for _, c := range []string{"h-in", "h-out", "h-fwd-in", "h-fwd-out", "h-wild-in", "h-wild-out"} {
		if err := d.SetChain(c, hostRules(c)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"h-prednat", "h-raw-in", "h-raw-out"} {
		rs := hostRules(c)
		rs[0].Action = nftdp.ActNotrack
		if c == "h-prednat" {
			rs[0].Action = nftdp.ActMarkAccept
		}
		if c != "h-raw-out" {
			rs[0].LogGroup, rs[0].LogRate, rs[0].LogPrefix = 8, 100, "F "+c
		}
		if err := d.SetChain(c, rs); err != nil {
			t.Fatal(err)
		}
	}
	d.SetHostEndpoints(nftdp.HostEndpoints{
		Endpoints: []nftdp.HostChains{
			{Iface: "eth-nl", In: "h-in", Out: "h-out", FwdIn: "h-fwd-in", FwdOut: "h-fwd-out", PreDNAT: "h-prednat", RawIn: "h-raw-in", RawOut: "h-raw-out"},
			{Iface: nftdp.WildcardIface, In: "h-wild-in", Out: "h-wild-out"},
		},
		FailsafeIn:  []nftdp.ProtoPort{{Proto: 6, Port: 22}, {Proto: 17, Port: 68}},
		FailsafeOut: []nftdp.ProtoPort{{Proto: 17, Port: 53}},
	})
	apply(t, d)

	out := nftList(t, node)
	for _, want := range []string{"table ip routed-policy", "table ip6 routed-policy", "table ip routed", "masquerade", "chain ep-nl", "@n-http", "@s-addrs", "map from-wl-dispatch", "chain h-raw-in", "notrack", "chain h-prednat", "iifname vmap @from-wl-dispatch",
		"goto fm-pass-", "goto fm-drop-", "goto fm-return-", "goto fm-notrack-", "goto fm-mark-accept-", `log prefix "F tok10" group 8`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("nft list ruleset lacks %q:\n%s", want, out)
		}
	}
}

// nftList runs the distribution's nft in the node's namespace.
func nftList(t *testing.T, node *polab.Node) string {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+node.Path(), "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v\n%s", err, out)
	}
	return string(out)
}

// TestLegacyDispatchReplaced: a table written by a routed that
// dispatched through interface -> id -> chain maps (which nft 1.0.x
// cannot list) is taken over in one transaction: the old maps go, the
// pod's traffic is dispatched through the new map, nft lists it all.
func TestLegacyDispatchReplaced(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-lg1", "10.66.1.1", "")
	b := node.AddPod(t, "cali-lg2", "10.66.1.2", "")
	polab.Serve(t, b.NS, 8080)

	conn, err := nftables.New(nftables.WithNetNSFd(node.Fd))
	if err != nil {
		t.Fatal(err)
	}
	tbl := conn.AddTable(&nftables.Table{Name: nftdp.DefaultTable, Family: nftables.TableFamilyIPv4})
	ids := &nftables.Set{Table: tbl, Name: "from-wl-ifaces", IsMap: true, KeyType: nftables.TypeIFName, DataType: nftables.TypeInteger}
	disp := &nftables.Set{Table: tbl, Name: "chain-dispatch", IsMap: true, KeyType: nftables.TypeInteger, DataType: nftables.TypeVerdict}
	for _, s := range []*nftables.Set{ids, disp} {
		if err := conn.AddSet(s, nil); err != nil {
			t.Fatal(err)
		}
	}
	ch := conn.AddChain(&nftables.Chain{Table: tbl, Name: "from-wl"})
	conn.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Lookup{SourceRegister: 1, DestRegister: 1, IsDestRegSet: true, SetName: ids.Name},
		&expr.Lookup{SourceRegister: 1, DestRegister: 0, IsDestRegSet: true, SetName: disp.Name},
	}})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}

	d := newDP(t, node)
	allowAll(d, a.Iface)
	allowAll(d, b.Iface)
	apply(t, d)

	out := nftList(t, node)
	for _, gone := range []string{"from-wl-ifaces", "chain-dispatch"} {
		if strings.Contains(out, gone) {
			t.Errorf("legacy map %s still in the table:\n%s", gone, out)
		}
	}
	if !strings.Contains(out, "iifname vmap @from-wl-dispatch") {
		t.Errorf("no dispatch through from-wl-dispatch:\n%s", out)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, true, "allow-all both ways after the take-over")
	if n := d.Writes(); n == 0 {
		t.Fatal("no write")
	}
	before := d.Writes()
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if d.Writes() != before {
		t.Errorf("a resync after the take-over wrote again (%d -> %d writes)", before, d.Writes())
	}
}
