package nftdp_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/kernel/policytable"
)

// kernelChains lists the chains of our table in one family.
func kernelChains(t *testing.T, n *polab.Node, fam nftables.TableFamily) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(n.Fd))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	chains, err := c.ListChainsOfTableFamily(fam)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ch := range chains {
		if ch.Table.Name == nftdp.DefaultTable {
			out = append(out, ch.Name)
		}
	}
	return out
}

// hasChain reports whether our table in fam has the chain.
func hasChain(t *testing.T, n *polab.Node, fam nftables.TableFamily, chain string) bool {
	t.Helper()
	return slices.Contains(kernelChains(t, n, fam), chain)
}

// applyResyncNoop applies, then checks that a resync writes nothing.
func applyResyncNoop(t *testing.T, d *nftdp.Dataplane, what string) {
	t.Helper()
	apply(t, d)
	w := d.Writes()
	if err := d.Resync(); err != nil || d.Writes() != w {
		t.Errorf("%s: resync: %v, %d writes", what, err, d.Writes()-w)
	}
}

// TestChainsOnlyWhereReachable: a chain only an IPv4 jump leads to is in
// the ip table and not in the ip6 one; when the jump applies to both
// families the chain appears in the ip6 table too (and real IPv6 traffic
// meets it), and when nothing leads to it any more it leaves both. A
// chain no endpoint uses is in neither. Each step is one Apply, and a
// resync after it writes nothing.
func TestChainsOnlyWhereReachable(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-ra", "10.68.0.1", "fd00:68::1")
	b := node.AddPod(t, "cali-rb", "10.68.0.2", "fd00:68::2")
	polab.Serve(t, b.NS, 8080)
	polab.Serve(t, b.NS, 9090)
	d := newDP(t, node)
	has := func(fam nftables.TableFamily, chain string) bool { return hasChain(t, node, fam, chain) }
	step := func(what string) { t.Helper(); applyResyncNoop(t, d, what) }
	v4, v6 := nftables.TableFamilyIPv4, nftables.TableFamilyIPv6

	allowAll(d, a.Iface)
	d.SetChain("deny-9090", []nftdp.Rule{{Proto: 6, Dst: nftdp.Side{Ports: []nftdp.PortRange{{9090, 9090}}}, Action: nftdp.ActDrop}})
	d.SetChain("unused", []nftdp.Rule{{Action: nftdp.ActDrop}})
	d.SetChain("tw-b", []nftdp.Rule{{IPVersion: 4, Action: nftdp.ActJump, Target: "deny-9090"}, {Action: nftdp.ActAccept}})
	d.SetEndpoint(b.Iface, "allow-all", "tw-b", nftdp.BothFamilies)
	step("IPv4 jump")
	if !has(v4, "deny-9090") || has(v6, "deny-9090") || has(v4, "unused") || has(v6, "unused") {
		t.Errorf("IPv4 jump: ip chains %v, ip6 chains %v", kernelChains(t, node, v4), kernelChains(t, node, v6))
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 9090}, false, "IPv4 9090 denied")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 9090}, true, "IPv6 9090 not policed")

	d.SetChain("tw-b", []nftdp.Rule{{Action: nftdp.ActJump, Target: "deny-9090"}, {Action: nftdp.ActAccept}})
	step("jump in both families")
	if !has(v4, "deny-9090") || !has(v6, "deny-9090") {
		t.Errorf("jump in both: ip chains %v, ip6 chains %v", kernelChains(t, node, v4), kernelChains(t, node, v6))
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 9090}, false, "IPv6 9090 denied")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 8080}, true, "IPv6 8080 allowed")

	d.DeleteEndpoint(b.Iface)
	step("endpoint gone")
	for _, fam := range []nftables.TableFamily{v4, v6} {
		if has(fam, "deny-9090") || has(fam, "tw-b") {
			t.Errorf("endpoint gone: family %d chains %v", fam, kernelChains(t, node, fam))
		}
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, false, "b no longer dispatched")
}

// TestEndpointOnlyInItsFamilies: an endpoint is dispatched only in the
// tables of its address families. b, dispatched as IPv4 only, has its
// chains and interface entries in the ip table alone: its IPv4 traffic
// meets its chains, its IPv6 traffic (the pod has an IPv6 address all
// the same) is dropped as an unknown interface's in both directions, a
// like endpoint takes one transaction, and Programmed asks only the
// families it is given. Made dual-stack, b is in both tables; back to
// IPv4 only, it leaves the ip6 table again. A resync after each step
// and a restarted dataplane write nothing.
func TestEndpointOnlyInItsFamilies(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-fa", "10.69.0.1", "fd00:69::1")
	b := node.AddPod(t, "cali-fb", "10.69.0.2", "fd00:69::2")
	c := node.AddPod(t, "cali-fc", "10.69.0.3", "")
	for _, p := range []*polab.Pod{a, b} {
		polab.Serve(t, p.NS, 8080)
	}
	d := newDP(t, node)
	has := func(fam nftables.TableFamily, chain string) bool { return hasChain(t, node, fam, chain) }
	step := func(what string) { t.Helper(); applyResyncNoop(t, d, what) }
	programmed := func(iface string, fams nftdp.Families) bool {
		t.Helper()
		ok, err := policytable.Programmed(node.Fd, "", iface, fams == nftdp.FamilyIPv4, fams == nftdp.FamilyIPv6)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	v4, v6 := nftables.TableFamilyIPv4, nftables.TableFamilyIPv6
	probes := func(what string, v6open bool) {
		t.Helper()
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, true, what+": a to b over IPv4")
		polab.Expect(t, b.NS, polab.Probe{Proto: "tcp", Dst: a.IPv4, Port: 8080}, true, what+": b to a over IPv4")
		polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 8080}, v6open, what+": a to b over IPv6")
		polab.Expect(t, b.NS, polab.Probe{Proto: "tcp", Dst: a.IPv6, Port: 8080}, v6open, what+": b to a over IPv6")
	}

	allowAll(d, a.Iface)
	d.SetChain("fw-b", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetChain("tw-b", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d.SetEndpoint(b.Iface, "fw-b", "tw-b", nftdp.FamilyIPv4)
	step("b IPv4 only")
	if !has(v4, "tw-b") || !has(v4, "fw-b") || has(v6, "tw-b") || has(v6, "fw-b") {
		t.Errorf("b IPv4 only: ip chains %v, ip6 chains %v", kernelChains(t, node, v4), kernelChains(t, node, v6))
	}
	if !programmed(b.Iface, nftdp.FamilyIPv4) || programmed(b.Iface, nftdp.BothFamilies) || programmed(b.Iface, nftdp.FamilyIPv6) {
		t.Errorf("b IPv4 only: Programmed IPv4 %v, both %v, IPv6 %v", programmed(b.Iface, nftdp.FamilyIPv4),
			programmed(b.Iface, nftdp.BothFamilies), programmed(b.Iface, nftdp.FamilyIPv6))
	}
	before, err := d.Counters(nil)
	if err != nil {
		t.Fatal(err)
	}
	probes("b IPv4 only", false)
	after, err := d.Counters(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"unknown-iface/ingress", "unknown-iface/egress"} {
		if after[id].Packets <= before[id].Packets {
			t.Errorf("b IPv4 only: counter %s did not count b's IPv6 (%d -> %d)", id, before[id].Packets, after[id].Packets)
		}
	}

	// A second IPv4-only endpoint on the same chains: one transaction
	// (the ip table's interface maps), none for the ip6 table.
	w := d.Writes()
	d.SetEndpoint(c.Iface, "fw-b", "tw-b", nftdp.FamilyIPv4)
	apply(t, d)
	if d.Writes()-w != 1 {
		t.Errorf("IPv4-only endpoint like b: %d transactions, want 1", d.Writes()-w)
	}
	polab.Expect(t, c.NS, polab.Probe{Proto: "tcp", Dst: a.IPv4, Port: 8080}, true, "c to a over IPv4")

	d.SetEndpoint(b.Iface, "fw-b", "tw-b", nftdp.BothFamilies)
	step("b dual-stack")
	if !has(v6, "tw-b") || !has(v6, "fw-b") || !programmed(b.Iface, nftdp.BothFamilies) {
		t.Errorf("b dual-stack: ip6 chains %v, Programmed %v", kernelChains(t, node, v6), programmed(b.Iface, nftdp.BothFamilies))
	}
	probes("b dual-stack", true)

	d.SetEndpoint(b.Iface, "fw-b", "tw-b", nftdp.FamilyIPv4)
	step("b IPv4 only again")
	if has(v6, "tw-b") || has(v6, "fw-b") || programmed(b.Iface, nftdp.FamilyIPv6) {
		t.Errorf("b IPv4 only again: ip6 chains %v", kernelChains(t, node, v6))
	}
	probes("b IPv4 only again", false)

	// A restarted dataplane with the same state writes nothing.
	d2 := newDP(t, node)
	allowAll(d2, a.Iface)
	d2.SetChain("fw-b", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d2.SetChain("tw-b", []nftdp.Rule{{Action: nftdp.ActAccept}})
	d2.SetEndpoint(b.Iface, "fw-b", "tw-b", nftdp.FamilyIPv4)
	d2.SetEndpoint(c.Iface, "fw-b", "tw-b", nftdp.FamilyIPv4)
	apply(t, d2)
	if d2.Writes() != 0 {
		t.Errorf("restart with the same state made %d writes", d2.Writes())
	}
}

// kernelSets lists the sets of our table in one family.
func kernelSets(t *testing.T, n *polab.Node, fam nftables.TableFamily) []string {
	t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(n.Fd))
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseLasting()
	sets, err := c.GetSets(&nftables.Table{Name: nftdp.DefaultTable, Family: fam})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, s := range sets {
		if !s.Anonymous && !s.IsMap {
			out = append(out, s.Name)
		}
	}
	return out
}

// TestSetsOnlyWhereUsed: a set is in a family's table only while a chain
// there looks it up. Used by an IPv4-only rule, it is in the ip table
// alone (and a member change is one transaction); when the rule applies
// to both families the set appears in the ip6 table too, filled, and real
// IPv6 traffic meets it; when no chain uses it any more it leaves both
// tables while the desired state still holds it. A resync after each step
// writes nothing.
func TestSetsOnlyWhereUsed(t *testing.T) {
	node := polab.NewNode(t)
	a := node.AddPod(t, "cali-sa", "10.70.0.1", "fd00:70::1")
	b := node.AddPod(t, "cali-sb", "10.70.0.2", "fd00:70::2")
	polab.Serve(t, b.NS, 8080)
	d := newDP(t, node)
	v4, v6 := nftables.TableFamilyIPv4, nftables.TableFamilyIPv6
	hasSet := func(fam nftables.TableFamily) bool { return slices.Contains(kernelSets(t, node, fam), "s-a") }

	allowAll(d, a.Iface)
	d.AddSet("s-a", nftdp.AddrSet)
	d.AddMember("s-a", nftdp.Member{Prefix: host(a.IPv4)})
	d.AddMember("s-a", nftdp.Member{Prefix: host(a.IPv6)})
	d.SetChain("tw-b", []nftdp.Rule{{IPVersion: 4, Src: nftdp.Side{Sets: []string{"s-a"}}, Action: nftdp.ActAccept}, {Action: nftdp.ActDrop}})
	d.SetEndpoint(b.Iface, "allow-all", "tw-b", nftdp.BothFamilies)
	applyResyncNoop(t, d, "IPv4 rule")
	if !hasSet(v4) || hasSet(v6) {
		t.Errorf("IPv4 rule: ip sets %v, ip6 sets %v", kernelSets(t, node, v4), kernelSets(t, node, v6))
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, true, "IPv4 from a, in the set")
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 8080}, false, "IPv6: no rule")
	w := d.Writes()
	d.AddMember("s-a", nftdp.Member{Prefix: netip.MustParsePrefix("10.70.9.9/32")})
	d.AddMember("s-a", nftdp.Member{Prefix: netip.MustParsePrefix("fd00:70::9:9/128")})
	apply(t, d)
	if d.Writes()-w != 1 {
		t.Errorf("members of a set only the ip table has: %d transactions, want 1", d.Writes()-w)
	}

	d.SetChain("tw-b", []nftdp.Rule{{Src: nftdp.Side{Sets: []string{"s-a"}}, Action: nftdp.ActAccept}, {Action: nftdp.ActDrop}})
	applyResyncNoop(t, d, "rule in both families")
	if !hasSet(v4) || !hasSet(v6) {
		t.Errorf("rule in both: ip sets %v, ip6 sets %v", kernelSets(t, node, v4), kernelSets(t, node, v6))
	}
	if _, n := kernelSet(t, node, v6, "s-a"); n != 2 {
		t.Errorf("ip6 set made when first used has %d elements, want 2", n)
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 8080}, true, "IPv6 from a, in the set")

	d.SetChain("tw-b", []nftdp.Rule{{Action: nftdp.ActDrop}})
	applyResyncNoop(t, d, "no rule uses the set")
	if hasSet(v4) || hasSet(v6) {
		t.Errorf("unused set: ip sets %v, ip6 sets %v", kernelSets(t, node, v4), kernelSets(t, node, v6))
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv4, Port: 8080}, false, "IPv4 after the drop")

	// Used again, by the IPv6 rule only: back in the ip6 table, filled.
	d.SetChain("tw-b", []nftdp.Rule{{IPVersion: 6, Src: nftdp.Side{Sets: []string{"s-a"}}, Action: nftdp.ActAccept}, {Action: nftdp.ActDrop}})
	applyResyncNoop(t, d, "IPv6 rule")
	if hasSet(v4) || !hasSet(v6) {
		t.Errorf("IPv6 rule: ip sets %v, ip6 sets %v", kernelSets(t, node, v4), kernelSets(t, node, v6))
	}
	polab.Expect(t, a.NS, polab.Probe{Proto: "tcp", Dst: b.IPv6, Port: 8080}, true, "IPv6 from a, set back")

	// A restarted dataplane with the same state writes nothing.
	d2 := newDP(t, node)
	allowAll(d2, a.Iface)
	d2.AddSet("s-a", nftdp.AddrSet)
	for _, p := range []string{"10.70.0.1/32", "fd00:70::1/128", "10.70.9.9/32", "fd00:70::9:9/128"} {
		d2.AddMember("s-a", nftdp.Member{Prefix: netip.MustParsePrefix(p)})
	}
	d2.SetChain("tw-b", []nftdp.Rule{{IPVersion: 6, Src: nftdp.Side{Sets: []string{"s-a"}}, Action: nftdp.ActAccept}, {Action: nftdp.ActDrop}})
	d2.SetEndpoint(b.Iface, "allow-all", "tw-b", nftdp.BothFamilies)
	apply(t, d2)
	if d2.Writes() != 0 {
		t.Errorf("restart with the same state made %d writes", d2.Writes())
	}
}
