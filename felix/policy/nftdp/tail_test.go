package nftdp_test

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// tailChains lists the tail chains (fm-...) of our table in one family.
func tailChains(t *testing.T, n *polab.Node, fam nftables.TableFamily) []string {
	t.Helper()
	var out []string
	for _, c := range kernelChains(t, n, fam) {
		if strings.HasPrefix(c, "fm-") {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// markedRules are b's ingress: 8080 allowed (two nftables rules of one
// policy rule, as a rule with numeric and named ports is written, going
// to one tail), 9090 denied, the rest passed; each marked on nflog
// group 9 at 1 packet a second.
func markedRules(allow8080 bool) []nftdp.Rule {
	ports := func(p uint16) nftdp.Side { return nftdp.Side{Ports: []nftdp.PortRange{{First: p, Last: p}}} }
	mark := func(r nftdp.Rule, tok string) nftdp.Rule {
		r.Counter, r.LogGroup, r.LogRate, r.LogPrefix = true, 9, 1, "F "+tok
		return r
	}
	first := nftdp.ActAccept
	if !allow8080 {
		first = nftdp.ActDrop
	}
	return []nftdp.Rule{
		mark(nftdp.Rule{ID: "tb/0", Proto: 6, Dst: ports(8080), Action: first}, "tok0"),
		mark(nftdp.Rule{ID: "tb/0", Proto: 6, Dst: ports(8081), Action: first}, "tok0"),
		mark(nftdp.Rule{ID: "tb/1", Proto: 6, Dst: ports(9090), Action: nftdp.ActDrop}, "tok1"),
		// A fall-through past rule 0 or 1 would meet these: the
		// opposite verdicts.
		{Proto: 6, Dst: ports(8080), Action: nftdp.ActDrop},
		{Proto: 6, Dst: ports(9090), Action: nftdp.ActAccept},
		{Action: nftdp.ActAccept},
	}
}

// TestTailChains: a verdict rule that also logs (a flow mark) is its
// matches, its counter and a goto to a tail chain holding the limited
// log and the verdict. Past the log's limit (1 a second) every new
// connection still gets the rule's verdict; its counter counts them
// all. Tails are shared by the nftables rules of one policy rule,
// created and deleted with the rules going to them (an edit that
// changes the verdict swaps the tail in the same transaction), a
// resync and a restarted dataplane write nothing, a flushed tail is
// put back by a resync, and tails are in a family's table only while
// a rule there goes to them. Callers cannot set or delete them.
func TestTailChains(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-ta", "10.70.0.1", "fd00:70::1")
	b := node.AddPod(t, "cali-tb", "10.70.0.2", "fd00:70::2")
	for _, port := range []int{8080, 9090} {
		polab.Serve(t, b.NS, port)
	}
	d := newDP(t, node)
	v4, v6 := nftables.TableFamilyIPv4, nftables.TableFamilyIPv6
	allowAll(d, a.Iface)
	if err := d.SetChain("tb", markedRules(true)); err != nil {
		t.Fatal(err)
	}
	d.SetEndpoint(b.Iface, "allow-all", "tb", nftdp.BothFamilies)
	applyResyncNoop(t, d, "marked rules")
	for _, fam := range []nftables.TableFamily{v4, v6} {
		if got := tailChains(t, node, fam); len(got) != 2 || !strings.HasPrefix(got[0], "fm-accept-") || !strings.HasPrefix(got[1], "fm-drop-") {
			t.Fatalf("family %d: tail chains %v, want one fm-accept- and one fm-drop-", fam, got)
		}
	}
	out := nftList(t, node)
	for _, want := range []string{`goto fm-accept-`, `goto fm-drop-`, `limit rate 1/second burst 1 packets log prefix "F tok0" group 9`} {
		if !strings.Contains(out, want) {
			t.Errorf("nft list ruleset lacks %q:\n%s", want, out)
		}
	}

	// More new connections than the limit lets log, each from its own
	// source port: every one gets its rule's verdict. An allowed
	// connection must answer before TCP's first SYN retransmit (1 s),
	// which a wrongly dropped SYN would need.
	const conns = 6
	for i := range conns {
		for _, v6 := range []bool{false, true} {
			polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 8080, SrcPort: 43100 + i, Timeout: 700e6}, true, fmt.Sprintf("allow past the limit, v6=%v", v6))
			polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.Addr(v6), Port: 9090, SrcPort: 43200 + i, Timeout: 150e6}, false, fmt.Sprintf("deny past the limit, v6=%v", v6))
		}
	}
	cs, err := d.Counters(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Policy chains see a connection's new packets only: at least its
	// SYN, in each of the two families.
	if cs["tb/0"].Packets < 2*conns || cs["tb/1"].Packets < 2*conns {
		t.Errorf("counters of the deciding rules: %+v, want at least %d packets each", cs, 2*conns)
	}

	// The edit turns rule 0's Allow into a Deny: its tail is swapped.
	if err := d.SetChain("tb", markedRules(false)); err != nil {
		t.Fatal(err)
	}
	applyResyncNoop(t, d, "rule 0 now denies")
	if got := tailChains(t, node, v4); len(got) != 2 || !strings.HasPrefix(got[0], "fm-drop-") || !strings.HasPrefix(got[1], "fm-drop-") {
		t.Errorf("after the edit: tail chains %v, want two fm-drop-", got)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080, Timeout: 150e6}, false, "8080 denied after the edit")

	// A restarted dataplane with the same desired state writes nothing.
	d2 := newDP(t, node)
	allowAll(d2, a.Iface)
	if err := d2.SetChain("tb", markedRules(false)); err != nil {
		t.Fatal(err)
	}
	d2.SetEndpoint(b.Iface, "allow-all", "tb", nftdp.BothFamilies)
	apply(t, d2)
	if d2.Writes() != 0 {
		t.Errorf("a restarted dataplane wrote %d transactions over the same state", d2.Writes())
	}

	// A tail flushed behind our back is put back by a resync.
	tail := tailChains(t, node, v4)[1]
	if out, err := exec.Command("nsenter", "--net="+node.Path(), "nft", "flush", "chain", "ip", nftdp.DefaultTable, tail).CombinedOutput(); err != nil {
		t.Fatalf("nft flush chain %s: %v\n%s", tail, err, out)
	}
	w := d2.Writes()
	if err := d2.Resync(); err != nil || d2.Writes() != w+1 {
		t.Fatalf("resync after a flushed tail: %v, %d writes", err, d2.Writes()-w)
	}
	for _, port := range []int{8080, 9090} {
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: port, Timeout: 150e6}, false, fmt.Sprintf("%d denied after the resync", port))
	}

	// Callers cannot set or delete a tail, nor log on a rule that
	// cannot carry it.
	if err := d2.SetChain(tail, nil); !errors.Is(err, nftdp.ErrInternalChain) {
		t.Errorf("SetChain(%s): %v, want ErrInternalChain", tail, err)
	}
	d2.DeleteChain(tail)
	if err := d2.SetChain("bad", []nftdp.Rule{{Action: nftdp.ActJump, Target: "tb", LogGroup: 9}}); err == nil {
		t.Error("a log on a jump was taken")
	}
	applyResyncNoop(t, d2, "refused calls")
	if got := tailChains(t, node, v4); len(got) != 2 {
		t.Errorf("after the refused calls: tail chains %v", got)
	}

	// An IPv4-only rule's tail is in the ip table only.
	rs := markedRules(false)
	rs[2].IPVersion = 4
	if err := d2.SetChain("tb", rs); err != nil {
		t.Fatal(err)
	}
	applyResyncNoop(t, d2, "IPv4-only deny")
	if g4, g6 := tailChains(t, node, v4), tailChains(t, node, v6); len(g4) != 2 || len(g6) != 1 {
		t.Errorf("IPv4-only deny: ip tails %v, ip6 tails %v", g4, g6)
	}

	// The chain goes: so do its tails.
	d2.DeleteEndpoint(b.Iface)
	d2.DeleteChain("tb")
	applyResyncNoop(t, d2, "chain deleted")
	for _, fam := range []nftables.TableFamily{v4, v6} {
		if got := tailChains(t, node, fam); len(got) != 0 {
			t.Errorf("family %d: tails %v left after their chain went", fam, got)
		}
	}
}
