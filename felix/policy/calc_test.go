package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// recSink records the state a Calc writes and the operations since the
// last reset.
type recSink struct {
	chains map[string][]nftdp.Rule
	sets   map[string]map[nftdp.Member]int
	eps    map[string][2]string // iface -> from, to chains
	fams   map[string]nftdp.Families
	ops    []string
}

func newRecSink() *recSink {
	return &recSink{chains: map[string][]nftdp.Rule{}, sets: map[string]map[nftdp.Member]int{}, eps: map[string][2]string{}, fams: map[string]nftdp.Families{}}
}

func (s *recSink) SetChain(name string, rules []nftdp.Rule) error {
	s.chains[name] = rules
	s.ops = append(s.ops, "chain "+name)
	return nil
}
func (s *recSink) DeleteChain(name string) {
	delete(s.chains, name)
	s.ops = append(s.ops, "-chain "+name)
}
func (s *recSink) AddSet(name string, _ nftdp.SetKind) {
	s.sets[name] = map[nftdp.Member]int{}
	s.ops = append(s.ops, "set "+name)
}
func (s *recSink) DeleteSet(name string) { delete(s.sets, name); s.ops = append(s.ops, "-set "+name) }
func (s *recSink) AddMember(set string, m nftdp.Member) {
	m.Prefix = m.Prefix.Masked() // as the dataplane does
	s.sets[set][m]++
	s.ops = append(s.ops, "member "+m.String())
}
func (s *recSink) RemoveMember(set string, m nftdp.Member) {
	m.Prefix = m.Prefix.Masked()
	if s.sets[set][m]--; s.sets[set][m] == 0 {
		delete(s.sets[set], m)
	}
	s.ops = append(s.ops, "-member "+m.String())
}
func (s *recSink) SetEndpoint(iface, from, to string, fams nftdp.Families) {
	s.eps[iface] = [2]string{from, to}
	s.fams[iface] = fams
	s.ops = append(s.ops, "ep "+iface)
}
func (s *recSink) DeleteEndpoint(iface string) {
	delete(s.eps, iface)
	delete(s.fams, iface)
	s.ops = append(s.ops, "-ep "+iface)
}

func (s *recSink) opsOf(prefix string) []string {
	var out []string
	for _, o := range s.ops {
		if strings.HasPrefix(o, prefix) {
			out = append(out, o)
		}
	}
	return out
}

func ep(name string, local bool, ip string, labels map[string]string) Endpoint {
	return Endpoint{Key: name, Iface: "cali" + name, Local: local, Namespace: "prod", Labels: labels,
		IPs: []netip.Prefix{netip.MustParsePrefix(ip + "/32")}}
}

func mustPolicy(t *testing.T, c *Calc, y string) {
	t.Helper()
	d, err := api.Decode([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetPolicy(d.Resources[0].(api.Policy)); err != nil {
		t.Fatal(err)
	}
}

func gnpYAML(name, order, tier, rest string) string {
	return fmt.Sprintf("apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: %s}\nspec:\n  order: %s\n  tier: %s\n%s\n", name, order, tier, rest)
}

// TestIncremental: a remote pod only changes set members; a local pod
// adds its dispatch entry, its memberships and, if no local pod has the
// same policies yet, its endpoint chains, and re-renders no policy
// chain; sets and policy chains exist only while a local endpoint uses
// them.
func TestIncremental(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	mustPolicy(t, c, gnpYAML("web", "10", "default", "  selector: app == 'web'\n  ingress: [{action: Allow, source: {selector: app == 'client'}}]"))
	if len(s.ops) != 0 {
		t.Fatalf("a policy selecting no local endpoint wrote %v", s.ops)
	}
	c.SetEndpoint(ep("w1", true, "10.0.0.1", map[string]string{"app": "web"}))
	if _, ok := s.chains["pi-gnp:web"]; !ok || len(s.sets) != 1 {
		t.Fatalf("after a selected local endpoint: chains %v sets %v", keys(s.chains), keys(s.sets))
	}
	s.ops = nil
	c.SetEndpoint(ep("r1", false, "10.0.1.1", map[string]string{"app": "client"}))
	if want := []string{"member 10.0.1.1/32"}; !slices.Equal(s.ops, want) {
		t.Errorf("remote client pod: ops %v, want %v", s.ops, want)
	}
	s.ops = nil
	c.SetEndpoint(ep("c2", true, "10.0.0.2", map[string]string{"app": "client"}))
	ch := s.eps["calic2"]
	// Its egress chain (no policy, no profile: drop) is w1's already.
	if got := s.opsOf("chain "); !slices.Equal(got, []string{"chain " + ch[1]}) || s.eps["caliw1"][0] != ch[0] {
		t.Errorf("first local client pod wrote chains %v, want only its new ingress chain of %v", got, ch)
	}
	if len(s.opsOf("member")) != 1 || len(s.opsOf("ep ")) != 1 {
		t.Errorf("local client pod: ops %v", s.ops)
	}
	s.ops = nil
	c.SetEndpoint(ep("c3", true, "10.0.0.3", map[string]string{"app": "client"}))
	if want := []string{"member 10.0.0.3/32", "ep calic3"}; !slices.Equal(s.ops, want) || s.eps["calic3"] != ch {
		t.Errorf("second local client pod: ops %v chains %v, want %v sharing %v", s.ops, s.eps["calic3"], want, ch)
	}
	// Dispatched in the tables of its address families only.
	if s.fams["calic3"] != nftdp.FamilyIPv4 {
		t.Errorf("IPv4-only pod dispatched in families %b", s.fams["calic3"])
	}
	d6 := ep("c6", true, "10.0.0.6", map[string]string{"app": "client"})
	d6.IPs = append(d6.IPs, netip.MustParsePrefix("fd00::6/128"))
	c.SetEndpoint(d6)
	if s.fams["calic6"] != nftdp.BothFamilies {
		t.Errorf("dual-stack pod dispatched in families %b", s.fams["calic6"])
	}
	c.DeleteEndpoint("c6")
	s.ops = nil
	c.DeleteEndpoint("w1")
	if _, ok := s.chains["pi-gnp:web"]; ok || len(s.sets) != 0 {
		t.Errorf("last selected endpoint gone: chains %v sets %v", keys(s.chains), keys(s.sets))
	}
	if _, ok := s.eps["caliw1"]; ok {
		t.Error("gone endpoint still dispatched")
	}
	c.DeleteEndpoint("c2")
	c.DeleteEndpoint("c3")
	if _, ok := s.chains[ch[0]]; ok {
		t.Errorf("endpoint chains left after the last endpoint using them: %v", keys(s.chains))
	}
}

// TestRuleEditTouchesOnlyItsChains: a policy edit that keeps its
// selection (selector, types, tier, order) re-renders only the policy's
// own chain and swaps its sets; the endpoints keep their chains and
// dispatch entries, and the new version is the one later changes see
// (a re-order moves it, the last endpoint's going removes its chain).
func TestRuleEditTouchesOnlyItsChains(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	web := func(order, src string) string {
		return gnpYAML("web", order, "default", "  selector: app == 'web'\n  ingress: [{action: Allow, source: {selector: "+src+"}}]")
	}
	mustPolicy(t, c, web("10", "app == 'client'"))
	mustPolicy(t, c, gnpYAML("other", "20", "default", "  selector: app == 'web'\n  ingress: [{action: Deny}]"))
	c.SetEndpoint(ep("w1", true, "10.0.0.1", map[string]string{"app": "web"}))
	c.SetEndpoint(ep("w2", true, "10.0.0.2", map[string]string{"app": "web"}))
	c.SetEndpoint(ep("r1", false, "10.0.1.1", map[string]string{"app": "db"}))
	before := s.eps["caliw1"]
	inChain := fmt.Sprint(s.chains[before[1]])

	s.ops = nil
	mustPolicy(t, c, web("10", "app == 'db'"))
	if got := s.opsOf("chain "); !slices.Equal(got, []string{"chain pi-gnp:web"}) {
		t.Errorf("rule edit wrote chains %v, want only pi-gnp:web", got)
	}
	if got := s.opsOf("ep "); len(got) != 0 {
		t.Errorf("rule edit re-dispatched endpoints: %v", got)
	}
	if len(s.opsOf("set ")) != 1 || len(s.opsOf("-set ")) != 1 || !slices.Equal(s.opsOf("member "), []string{"member 10.0.1.1/32"}) {
		t.Errorf("rule edit's set ops %v: want the db set made and filled, the client set gone", s.ops)
	}
	if s.eps["caliw1"] != before || fmt.Sprint(s.chains[before[1]]) != inChain {
		t.Errorf("endpoint chains changed: %v -> %v", before, s.eps["caliw1"])
	}

	// Re-ordered after "other": the endpoints' shared ingress chain changes.
	s.ops = nil
	mustPolicy(t, c, web("30", "app == 'db'"))
	after := s.eps["caliw1"]
	if after[1] == before[1] || s.eps["caliw2"] != after {
		t.Fatalf("re-order: ingress chain %v -> %v (w2 %v), want a new shared one", before, after, s.eps["caliw2"])
	}
	var targets []string
	for _, r := range s.chains[after[1]] {
		if r.Target != "" {
			targets = append(targets, r.Target)
		}
	}
	if !slices.Equal(targets, []string{"pi-gnp:other", "pi-gnp:web"}) {
		t.Errorf("re-ordered jumps %v", targets)
	}
	c.DeleteEndpoint("w1")
	c.DeleteEndpoint("w2")
	if _, ok := s.chains["pi-gnp:web"]; ok || len(s.sets) != 0 {
		t.Errorf("last selected endpoint gone: chains %v sets %v", keys(s.chains), keys(s.sets))
	}
}

// TestEvaluationOrder: endpoint chains jump to policies by tier order,
// then policy order, then name; a tier's end drops unless its
// defaultAction is Pass; profiles come after the tiers.
func TestEvaluationOrder(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	pass := api.ActionPass
	o := func(f float64) *float64 { return &f }
	c.SetTier(&api.Tier{Metadata: api.ObjectMeta{Name: "early"}, Spec: api.TierSpec{Order: o(5), DefaultAction: &pass}})
	for _, p := range [][3]string{{"b", "10", "default"}, {"a", "10", "default"}, {"z", "1", "default"}, {"x", "100", "early"}} {
		mustPolicy(t, c, gnpYAML(p[0], p[1], p[2], "  selector: all()\n  types: [Ingress]"))
	}
	if err := c.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: "kns.prod"}}); err != nil {
		t.Fatal(err)
	}
	e := ep("w", true, "10.0.0.1", nil)
	e.Profiles = []string{"kns.prod"}
	c.SetEndpoint(e)
	tw, fw := s.chains[s.eps["caliw"][1]], s.chains[s.eps["caliw"][0]]
	var got []string
	for _, r := range tw {
		switch {
		case r.Action == nftdp.ActJump && strings.HasPrefix(r.Target, "r-"):
			// A guarded run (z, a and b have no ingress rules, so no
			// peer can match them: their guard is empty).
			if len(r.Src.Sets) != 1 || len(s.sets[r.Src.Sets[0]]) != 0 {
				t.Errorf("run %s: guard %v with members %v", r.Target, r.Src.Sets, s.sets)
			}
			for _, j := range s.chains[r.Target] {
				got = append(got, j.Target)
			}
		case r.Action == nftdp.ActJump:
			got = append(got, r.Target)
		case r.Action == nftdp.ActDrop:
			_, id, _ := strings.Cut(r.ID, "/")
			got = append(got, "drop:"+id)
		}
	}
	want := []string{"pi-gnp:x", "pi-gnp:z", "pi-gnp:a", "pi-gnp:b", "drop:tier-end/default", "pri-kns.prod", "drop:no-profile-allowed"}
	if !slices.Equal(got, want) {
		t.Errorf("ingress chain order\n got %v\nwant %v", got, want)
	}
	if len(fw) != 2 || fw[0].Target != "pro-kns.prod" {
		t.Errorf("egress (no policy): %+v, want the profile then drop", fw)
	}
	// w has IPv4 only: in the ip6 table its chains are the final drop.
	for i, r := range tw {
		last := i == len(tw)-1
		if (r.IPVersion == 4) == last {
			t.Errorf("rule %d (%v %s): IPVersion %d", i, r.Action, r.Target, r.IPVersion)
		}
	}
}

// TestNamedPortsAndNetsets: named-port sets hold address . protocol .
// port of the endpoints the side selects; network sets add their nets.
func TestNamedPortsAndNetsets(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	mustPolicy(t, c, gnpYAML("p", "1", "default", "  selector: app == 'web'\n  ingress: [{action: Allow, protocol: TCP, source: {selector: role == 'db'}, destination: {ports: [http]}}]"))
	web := ep("w", true, "10.0.0.1", map[string]string{"app": "web"})
	web.Ports = []NamedPort{{Name: "http", Proto: 6, Port: 8080}, {Name: "http", Proto: 17, Port: 8081}}
	c.SetEndpoint(web)
	c.SetNetworkSet(NetworkSet{Key: "gns:db", Labels: map[string]string{"role": "db"}, Nets: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}})
	var named, addrs []string
	for name, ms := range s.sets {
		for m := range ms {
			if strings.HasPrefix(name, "n-") {
				named = append(named, m.String())
			} else {
				addrs = append(addrs, m.String())
			}
		}
	}
	if !slices.Equal(named, []string{"10.0.0.1 . 6 . 8080"}) || !slices.Equal(addrs, []string{"192.168.0.0/16"}) {
		t.Errorf("named-port members %v, address members %v", named, addrs)
	}
}

// TestInvalidPolicyRefused: a bad field is an ErrInvalid naming it, and
// the previous version stays.
func TestInvalidPolicyRefused(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	mustPolicy(t, c, gnpYAML("p", "1", "default", "  selector: all()\n  ingress: [{action: Allow}]"))
	c.SetEndpoint(ep("w", true, "10.0.0.1", nil))
	before := len(s.chains["pi-gnp:p"])
	for _, bad := range []string{
		"  selector: all()\n  ingress: [{action: Allow, source: {selector: 'a ==='}}]",
		"  selector: all()\n  ingress: [{action: Allow, source: {nets: [10.0.0.0/33]}}]",
		"  selector: all()\n  ingress: [{action: Allow, protocol: ICMP, destination: {ports: [80]}}]",
		"  selector: all()\n  ingress: [{action: Allow, protocol: ICMP, icmp: {code: 1}}]",
	} {
		d, err := api.Decode([]byte(gnpYAML("p", "1", "default", bad)))
		if err != nil {
			t.Fatal(err)
		}
		err = c.SetPolicy(d.Resources[0].(api.Policy))
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.ingress[0].") {
			t.Errorf("%q: error %v, want ErrInvalid naming spec.ingress[0]", bad, err)
		}
	}
	if len(s.chains["pi-gnp:p"]) != before {
		t.Error("a refused policy changed the chain")
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestLessBreaksEqualTieNamesByKey: two policies whose tie names are
// equal (a NetworkPolicy carrying the controllers' annotations of the
// Kubernetes policy it shares a namespace and source name with) are
// ordered by their keys, whichever way they are compared, so every node
// and explain agree.
func TestLessBreaksEqualTieNamesByKey(t *testing.T) {
	c := &Calc{}
	a := &cpolicy{key: "np:prod/knp.default.web", name: tieName("web", "prod", "KubernetesNetworkPolicy"), order: 1000}
	b := &cpolicy{key: "np:prod/knp.default.q", name: a.name, order: 1000}
	if got, back := c.less(b, a), c.less(a, b); got != -1 || back != 1 {
		t.Fatalf("less(q, web) = %d, less(web, q) = %d: want -1 and 1 (by key)", got, back)
	}
	if got := c.less(a, a); got != 0 {
		t.Fatalf("less(web, web) = %d, want 0", got)
	}
}

const webPolicy = `apiVersion: routed.io/v1
kind: GlobalNetworkPolicy
metadata: {name: web}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]
`

// TestRenamedEndpointKeepsItsInterface: a pod's endpoint set under a new
// name on the same interface before the old name is deleted keeps the
// interface's dispatch (its chains, and the rule index's owner) once
// the old one goes, whichever order the two changes come in.
func TestRenamedEndpointKeepsItsInterface(t *testing.T) {
	for _, oldFirst := range []bool{false, true} {
		s := newRecSink()
		c := NewCalc(s, LogConfig{})
		mustPolicy(t, c, webPolicy)
		a := ep("a", true, "10.0.0.1", map[string]string{"app": "web"})
		b := ep("b", true, "10.0.0.1", map[string]string{"app": "web"})
		b.Iface = a.Iface
		c.SetEndpoint(a)
		if oldFirst {
			c.DeleteEndpoint("a")
			c.SetEndpoint(b)
		} else {
			c.SetEndpoint(b)
			c.DeleteEndpoint("a")
		}
		fresh := newRecSink()
		fc := NewCalc(fresh, LogConfig{})
		mustPolicy(t, fc, webPolicy)
		fc.SetEndpoint(b)
		want := fresh.eps[b.Iface]
		got, ok := s.eps[b.Iface]
		if !ok || got != want || want[0] == "" {
			t.Fatalf("old deleted first %v: %s dispatches to %v (present %v), want %v as a calculator given only the new endpoint", oldFirst, b.Iface, got, ok, want)
		}
		for _, ch := range got {
			if _, ok := s.chains[ch]; !ok {
				t.Fatalf("old deleted first %v: the dispatch's chain %s is not programmed", oldFirst, ch)
			}
		}
		if ref, ok := c.Index().Endpoint(b.Iface); !ok || ref.Key != "b" {
			t.Fatalf("old deleted first %v: the rule index names %+v (present %v) on %s, want b", oldFirst, ref, ok, b.Iface)
		}
	}
}
