package nftdp_test

import (
	"slices"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
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
	has := func(fam nftables.TableFamily, chain string) bool {
		return slices.Contains(kernelChains(t, node, fam), chain)
	}
	step := func(what string) {
		t.Helper()
		apply(t, d)
		w := d.Writes()
		if err := d.Resync(); err != nil || d.Writes() != w {
			t.Errorf("%s: resync: %v, %d writes", what, err, d.Writes()-w)
		}
	}
	v4, v6 := nftables.TableFamilyIPv4, nftables.TableFamilyIPv6

	allowAll(d, a.Iface)
	d.SetChain("deny-9090", []nftdp.Rule{{Proto: 6, Dst: nftdp.Side{Ports: []nftdp.PortRange{{9090, 9090}}}, Action: nftdp.ActDrop}})
	d.SetChain("unused", []nftdp.Rule{{Action: nftdp.ActDrop}})
	d.SetChain("tw-b", []nftdp.Rule{{IPVersion: 4, Action: nftdp.ActJump, Target: "deny-9090"}, {Action: nftdp.ActAccept}})
	d.SetEndpoint(b.Iface, "allow-all", "tw-b")
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
