package nftdp_test

import (
	"net/netip"
	"os"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/felix/natout"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

func newDP(t *testing.T, n *polab.Node) *nftdp.Dataplane {
	t.Helper()
	d, err := nftdp.New(nftdp.Config{NetnsFd: n.Fd})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func apply(t *testing.T, d *nftdp.Dataplane) {
	t.Helper()
	if err := d.Apply(); err != nil {
		t.Fatal(err)
	}
}

func host(a netip.Addr) netip.Prefix { return netip.PrefixFrom(a, a.BitLen()) }

// allowAll dispatches an endpoint to a chain that accepts everything,
// shared by every endpoint using it.
func allowAll(d *nftdp.Dataplane, iface string) {
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(iface, "allow-all", "allow-all", nftdp.BothFamilies)
}

// TestDispatchFailClosed: a cali interface without a dispatch entry
// passes nothing, one with an entry gets exactly its chain's verdicts,
// the host still reaches a pod whose ingress drops everything, a resync
// with nothing changed writes nothing, and a foreign table keeps its rule.
func TestDispatchFailClosed(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-a", "10.65.0.1", "fd00:65::1")
	b := node.AddPod(t, "cali-b", "10.65.0.2", "fd00:65::2")
	c := node.AddPod(t, "cali-c", "10.65.0.3", "")
	for _, p := range []*polab.Pod{a, b, c} {
		polab.Serve(t, p.NS, 8080)
		polab.Serve(t, p.NS, 9090)
	}

	// A foreign table with a counting rule on the forward hook.
	conn, err := nftables.New(nftables.WithNetNSFd(node.Fd))
	if err != nil {
		t.Fatal(err)
	}
	ft, fc := nftdp.ForeignCountingTable(t, conn, "kube-proxy")

	// felix/natout's tables, named "routed", live next to ours.
	nat, err := natout.New(node.Fd)
	if err != nil {
		t.Fatal(err)
	}
	defer nat.Close()
	nat.SetPools([]netip.Prefix{netip.MustParsePrefix("10.65.0.0/16")}, []netip.Prefix{netip.MustParsePrefix("10.65.0.0/16")})
	if err := nat.Apply(false); err != nil {
		t.Fatal(err)
	}

	d := newDP(t, node)
	allowAll(d, a.Iface)
	// b: ingress accepts tcp/8080 from a's addresses only, drops the rest.
	d.AddSet("s-a", nftdp.AddrSet)
	d.AddMember("s-a", nftdp.Member{Prefix: host(a.IPv4)})
	d.AddMember("s-a", nftdp.Member{Prefix: host(a.IPv6)})
	d.SetChain("allow-all", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetChain("tw-b", []nftdp.Rule{
		{ID: "b/0", Proto: 6, Src: nftdp.Side{Sets: []string{"s-a"}}, Dst: nftdp.Side{Ports: []nftdp.PortRange{{8080, 8080}}}, Counter: true, Action: nftdp.ActAccept},
		{ID: "b/end", Counter: true, Action: nftdp.ActDrop},
	})
	d.SetEndpoint(b.Iface, "allow-all", "tw-b", nftdp.BothFamilies)
	apply(t, d)

	for _, v6 := range []bool{false, true} {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080}, true, "allowed port from a")
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 9090}, false, "other port from a")
		polab.Expect(t, a.NS, polab.Probe{Proto: "udp", Dst: b.Addr(v6), Port: 8080}, false, "udp to the tcp port")
		polab.Expect(t, b.NS, polab.Probe{Proto: "tcp", Dst: a.Addr(v6), Port: 9090}, true, "b to a (a allows all)")
		// The host reaches b under its deny-all ingress (kubelet probes).
		polab.Expect(t, node.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 9090}, true, "host to b")
	}
	polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: a.IPv4, Port: 8080}, false, "from unprogrammed c")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: c.IPv4, Port: 8080}, false, "to unprogrammed c")
	polab.Expect(t, c.NS, polab.Probe{Proto: "icmp", Dst: netip.MustParseAddr("169.254.1.1")}, false, "unprogrammed c to host")

	cs, err := d.Counters(nil)
	if err != nil {
		t.Fatal(err)
	}
	if cs["b/0"].Packets == 0 || cs["b/end"].Packets == 0 {
		t.Errorf("counters %v: want hits on b/0 and b/end", cs)
	}

	// Programming c opens it.
	allowAll(d, c.Iface)
	apply(t, d)
	polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: a.IPv4, Port: 8080}, true, "from programmed c")
	polab.Expect(t, a.NS, polab.Probe{Proto: "icmp", Dst: c.IPv4}, true, "ping programmed c")

	// Nothing changed: Apply and Resync write nothing.
	w := d.Writes()
	apply(t, d)
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	if d.Writes() != w {
		t.Errorf("no-op Apply+Resync made %d writes", d.Writes()-w)
	}

	// A new dataplane (a restarted felix) finds the tables as it wants
	// them and writes nothing either.
	d2 := newDP(t, node)
	allowAll(d2, a.Iface)
	allowAll(d2, c.Iface)
	d2.AddSet("s-a", nftdp.AddrSet)
	d2.AddMember("s-a", nftdp.Member{Prefix: host(a.IPv4)})
	d2.AddMember("s-a", nftdp.Member{Prefix: host(a.IPv6)})
	d2.SetChain("tw-b", []nftdp.Rule{
		{ID: "b/0", Proto: 6, Src: nftdp.Side{Sets: []string{"s-a"}}, Dst: nftdp.Side{Ports: []nftdp.PortRange{{8080, 8080}}}, Counter: true, Action: nftdp.ActAccept},
		{ID: "b/end", Counter: true, Action: nftdp.ActDrop},
	})
	d2.SetEndpoint(b.Iface, "allow-all", "tw-b", nftdp.BothFamilies)
	apply(t, d2)
	if d2.Writes() != 0 {
		t.Errorf("restart with the same state made %d writes", d2.Writes())
	}

	// Removing a from the set closes b to it.
	d.RemoveMember("s-a", nftdp.Member{Prefix: host(a.IPv4)})
	apply(t, d)
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, false, "a out of the set")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 8080}, true, "a's IPv6 still in the set")

	// Someone flushes one of our chains: a resync restores it.
	conn.FlushChain(&nftables.Chain{Name: "tw-b", Table: &nftables.Table{Name: nftdp.DefaultTable, Family: nftables.TableFamilyIPv6}})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 9090}, true, "flushed chain lets all through")
	if err := d.Resync(); err != nil {
		t.Fatal(err)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 9090}, false, "resync restored the chain")

	// The foreign table's rule is still there and counted traffic.
	rules, err := conn.GetRules(ft, fc)
	if err != nil || len(rules) != 1 {
		t.Fatalf("foreign rules: %d, %v", len(rules), err)
	}
	if cnt := rules[0].Exprs[0].(*expr.Counter); cnt.Packets == 0 {
		t.Error("foreign counter saw no packets")
	}
	if got, err := natout.ReadSet(conn, natout.NATPoolsSet); err != nil || len(got) != 1 {
		t.Errorf("natout's set after our programs and resyncs: %v, %v", got, err)
	}
}

func init() {
	if os.Getenv("NFTDP_DEBUG") != "" {
		logrus.SetLevel(logrus.DebugLevel)
	}
}

// TestApplyRefusesDanglingDispatch: Apply checks only what changed, yet
// still refuses (writing nothing) an endpoint dispatched to a chain not
// set and the deletion of a chain an unchanged endpoint is dispatched
// to; moving endpoints between chains keeps every id right, so a
// resync (which reads the dispatch maps back) writes nothing.
func TestApplyRefusesDanglingDispatch(t *testing.T) {
	node := polab.NewNode(t)
	d := newDP(t, node)
	d.SetEndpoint("cali-x", "a", "a", nftdp.BothFamilies)
	if err := d.Apply(); err == nil || d.Writes() != 0 {
		t.Fatalf("endpoint on a missing chain: %v, %d writes", err, d.Writes())
	}
	d.SetChain("a", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetChain("b", []nftdp.Rule{{Action: nftdp.ActDrop}})
	d.SetEndpoint("cali-y", "b", "a", nftdp.BothFamilies)
	apply(t, d)
	w := d.Writes()
	d.DeleteChain("b")
	if err := d.Apply(); err == nil || d.Writes() != w {
		t.Fatalf("deleting a chain cali-y uses: %v, %d writes", err, d.Writes()-w)
	}
	d.SetEndpoint("cali-y", "a", "a", nftdp.BothFamilies)
	apply(t, d)
	d.SetChain("c", []nftdp.Rule{{Action: nftdp.ActReturn}})
	d.SetEndpoint("cali-x", "c", "a", nftdp.BothFamilies)
	apply(t, d)
	d.DeleteEndpoint("cali-y")
	d.SetEndpoint("cali-z", "a", "c", nftdp.BothFamilies)
	apply(t, d)
	w = d.Writes()
	if err := d.Resync(); err != nil || d.Writes() != w {
		t.Errorf("resync after the moves: %v, %d writes", err, d.Writes()-w)
	}
}
