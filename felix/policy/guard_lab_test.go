package policy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/nftables"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/felix/policy/nftdp"
)

// guardSets lists the guard sets (see calc_guard.go) in the lab's ip or
// ip6 table with their element counts: proof that a test's policies
// run behind a guard, not a verdict.
func (l *lab) guardSets(v6 bool) map[string]int {
	l.t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(l.node.Fd))
	if err != nil {
		l.t.Fatal(err)
	}
	fam := nftables.TableFamilyIPv4
	if v6 {
		fam = nftables.TableFamilyIPv6
	}
	tbl := &nftables.Table{Name: nftdp.DefaultTable, Family: fam}
	sets, err := c.GetSets(tbl)
	if err != nil {
		l.t.Fatal(err)
	}
	out := map[string]int{}
	for _, s := range sets {
		if !strings.HasPrefix(s.Name, "g-") {
			continue
		}
		els, err := c.GetSetElements(s)
		if err != nil {
			l.t.Fatal(err)
		}
		out[s.Name] = len(els)
	}
	return out
}

func (l *lab) wantGuards(why string) {
	l.t.Helper()
	for _, v6 := range []bool{false, true} {
		if len(l.guardSets(v6)) == 0 {
			l.t.Fatalf("%s: no guard set in the v6=%v table: the policies are not behind a guard", why, v6)
		}
	}
}

// TestGuardedRunVerdicts: policies whose every rule needs the peer in a
// selector's set or in nets run behind one guard lookup; the verdicts
// are Calico's all the same, on real traffic over both families.
//   - A Deny in the run still denies (a source the guard lacked would
//     skip it, and the tier's Pass default and the profile would let
//     it through).
//   - A Pass in the run skips the rest of the run (a later Deny there
//     would drop it).
//   - A Log rule logs and goes on; an Allow over nets allows.
//   - A pod relabelled into a Deny's set, a new pod in it, and a pod
//     inside a network set's net are dropped from the first Apply on;
//     taken out again, they pass.
//   - Egress: a run with a Deny and an Allow over nets; what matches
//     neither (a pod, the node) reaches the tier's end and is dropped.
func TestGuardedRunVerdicts(t *testing.T) {
	l := newLabWithLog(t, false)
	logs := l.logRecords(t)
	a4, a6 := l.pods["a"].IPv4, l.pods["a"].IPv6
	b4, b6 := l.pods["b"].IPv4, l.pods["b"].IPv6
	sec := func(name, order, rules string) string {
		return gnp(name, "  tier: sec\n  order: "+order+"\n  selector: app == 'b'\n  types: [Ingress]\n  ingress: "+rules)
	}
	l.load("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: sec}\nspec: {order: 50, defaultAction: Pass}\n" +
		sec("s1", "1", `[{action: Deny, protocol: TCP, source: {selector: app == 'c'}, destination: {ports: [8080]}}]`) +
		sec("s2", "2", `[{action: Pass, source: {selector: app == 'd'}}]`) +
		sec("s3", "3", `[{action: Log, protocol: TCP, source: {selector: app == 'a'}}]`) +
		sec("s4", "4", `[{action: Allow, protocol: TCP, source: {nets: [`+a4.String()+`/32, `+a6.String()+`/128]}, destination: {ports: [9090]}}]`) +
		sec("s5", "5", `[{action: Deny, source: {selector: app == 'd'}}, {action: Deny, source: {selector: role == 'blocked'}}]`) +
		gnp("eg-a", `  order: 1000
  selector: app == 'a'
  types: [Egress]
  egress: [{action: Deny, destination: {selector: app == 'c'}}, {action: Allow, destination: {nets: [`+b4.String()+`/32, `+b6.String()+`/128]}}]
`) + gnp("eg-a2", `  order: 2000
  selector: app == 'a'
  types: [Egress]
  egress: [{action: Allow, protocol: UDP, destination: {selector: app == 'c'}}]
`))
	l.apply()
	l.wantGuards("loaded")
	var ps []probe
	for _, p := range [][]probe{
		both(drop("c", "b", "tcp", 8080)),    // s1 denies
		both(pass("c", "b", "tcp", 9090)),    // nothing in sec: tier passes, profile allows
		both(pass("d", "b", "tcp", 8080)),    // s2 passes before s5's deny
		both(pass("a", "b", "tcp", 9090)),    // s3 logs, s4 allows
		both(pass("a", "b", "tcp", 8080)),    // s3 logs, tier passes
		both(drop("a", "c", "tcp", 8080)),    // eg-a denies
		both(drop("a", "c", "udp", 5353)),    // eg-a denies before eg-a2 allows
		both(drop("a", "d", "tcp", 8080)),    // no egress rule: tier end
		both(drop("a", "host", "tcp", 7070)), // not in the guard: tier end
	} {
		ps = append(ps, p...)
	}
	l.expect("guarded runs", ps...)
	waitRecord(t, logs, "s3's Log rule", func(r flowlog.Record) bool { return r.Policy == "gnp:s3" && r.Verdict == "log" })

	// d relabelled into s1's set: denied on 8080 from this Apply on; a
	// new pod e in it too.
	d := l.eps["d"]
	d.Labels = map[string]string{"app": "c"}
	if err := l.m.SetEndpoint(d); err != nil {
		t.Fatal(err)
	}
	l.addPod("e", "dev", "sa-e", map[string]string{"app": "c"}, nil)
	l.apply()
	l.expect("into a Deny's set", append(append(both(drop("d", "b", "tcp", 8080)), both(drop("e", "b", "tcp", 8080))...), both(pass("e", "b", "tcp", 9090))...)...)

	// A network set over e's addresses marked blocked: s5 denies e.
	l.load(`apiVersion: projectcalico.org/v3
kind: GlobalNetworkSet
metadata: {name: blocked, labels: {role: blocked}}
spec: {nets: [10.65.0.4/30, "fd00:65::4/126"]}
`)
	l.apply()
	l.expect("inside a network set's nets", both(drop("e", "b", "tcp", 9090))...)

	// Out again: e's set membership and the network set gone.
	l.m.DeleteGlobalNetworkSet("blocked")
	e := l.eps["e"]
	e.Labels = map[string]string{"app": "z"}
	if err := l.m.SetEndpoint(e); err != nil {
		t.Fatal(err)
	}
	l.apply()
	l.wantGuards("after the changes")
	l.expect("out of the sets", append(both(pass("e", "b", "tcp", 8080)), both(pass("e", "b", "tcp", 9090))...)...)
}

// TestGuardFollowsRuleEdits: a rule edit that changes a guarded
// policy's peers (the fast path that leaves the endpoint chains alone
// when the guard stays) moves the guard with it: a new Deny source is
// denied, the old one passes; a rule that needs no peer ends the run
// and the policy's rule still applies.
func TestGuardFollowsRuleEdits(t *testing.T) {
	l := newLab(t)
	deny := func(src string) string {
		return gnp("d1", "  order: 1\n  selector: app == 'b'\n  types: [Ingress]\n  ingress: [{action: Deny, protocol: TCP, "+src+"}]")
	}
	allow := gnp("d2", "  order: 2\n  selector: app == 'b'\n  types: [Ingress]\n  ingress: [{action: Allow, source: {selector: has(app)}}]")
	l.load(deny("source: {selector: app == 'a'}") + allow)
	l.apply()
	l.wantGuards("loaded")
	l.expect("deny a", append(both(drop("a", "b", "tcp", 8080)), both(pass("c", "b", "tcp", 8080))...)...)
	l.load(deny("source: {selector: app == 'c'}"))
	l.apply()
	l.expect("deny c", append(both(drop("c", "b", "tcp", 8080)), both(pass("a", "b", "tcp", 8080))...)...)
	l.load(deny("source: {nets: [10.65.0.4/32, 'fd00:65::4/128']}"))
	l.apply()
	l.expect("deny d's nets", append(both(drop("d", "b", "tcp", 8080)), both(pass("c", "b", "tcp", 8080))...)...)
	l.load(deny("destination: {ports: [8080]}"))
	l.apply()
	if g := l.guardSets(false); len(g) != 0 {
		t.Errorf("a run of one policy left: guards %v", g)
	}
	l.expect("deny any to 8080", append(both(drop("a", "b", "tcp", 8080)), both(pass("a", "b", "tcp", 9090))...)...)
}

// TestGuardResync: a resync of guarded runs makes no write, and a
// member taken out of a guard set behind felix's back is put back. The
// run is in a tier whose end passes to the profile (which allows), so
// while the guard lacks a's address a skips the run's Deny and passes.
func TestGuardResync(t *testing.T) {
	l := newLab(t)
	l.load("apiVersion: projectcalico.org/v3\nkind: Tier\nmetadata: {name: sec}\nspec: {order: 50, defaultAction: Pass}\n" +
		gnp("r1", "  tier: sec\n  order: 1\n  selector: app == 'b'\n  ingress: [{action: Deny, protocol: TCP, source: {selector: app == 'a'}}]") +
		gnp("r2", "  tier: sec\n  order: 2\n  selector: app == 'b'\n  ingress: [{action: Deny, protocol: UDP, source: {selector: app == 'c'}}]"))
	l.apply()
	l.wantGuards("loaded")
	l.expect("guarded", append(both(drop("a", "b", "tcp", 8080)), both(pass("c", "b", "tcp", 8080))...)...)
	w := l.m.Writes()
	if err := l.m.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := l.m.Writes() - w; got != 0 {
		t.Errorf("resync of an unchanged table made %d writes", got)
	}
	c, err := nftables.New(nftables.WithNetNSFd(l.node.Fd))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Name: nftdp.DefaultTable, Family: nftables.TableFamilyIPv4}
	var name string
	for n := range l.guardSets(false) {
		name = n
	}
	a := l.pods["a"].IPv4.As4()
	if err := c.SetDeleteElements(&nftables.Set{Table: tbl, Name: name, KeyType: nftables.TypeIPAddr}, []nftables.SetElement{{Key: a[:]}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("deleting %v from %s: %v", netip.AddrFrom4(a), name, err)
	}
	polab.Expect(t, l.pods["a"].NS, polab.Probe{Proto: "tcp", Dst: l.pods["b"].IPv4, Port: 8080}, true, "a out of the guard skips the run's Deny")
	if err := l.m.Resync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := l.guardSets(false)[name]; got != 2 {
		t.Errorf("after resync guard %s has %d elements, want a's and c's", name, got)
	}
	l.expect("after resync", append(both(drop("a", "b", "tcp", 8080)), both(pass("c", "b", "tcp", 8080))...)...)
}
