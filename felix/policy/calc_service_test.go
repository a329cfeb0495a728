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

func svcRecord(ns, name string, subsets ...api.ServiceSubset) *api.ServiceEndpoints {
	return &api.ServiceEndpoints{Metadata: api.ObjectMeta{Name: name, Namespace: ns}, Spec: api.ServiceEndpointsSpec{Subsets: subsets}}
}

func svcPort(proto string, port uint16) api.ServicePort {
	return api.ServicePort{Protocol: api.Protocol{Name: proto}, Port: port}
}

func memberSet(t *testing.T, ms ...string) map[nftdp.Member]int {
	t.Helper()
	out := map[nftdp.Member]int{}
	for _, s := range ms {
		var m nftdp.Member
		f := strings.Split(s, " ")
		a := netip.MustParseAddr(f[0])
		m.Prefix = netip.PrefixFrom(a, a.BitLen())
		if len(f) == 3 {
			m.Proto = map[string]uint8{"tcp": 6, "udp": 17, "sctp": 132}[f[1]]
			var p int
			for _, c := range f[2] {
				p = p*10 + int(c-'0')
			}
			m.Port = uint16(p)
		}
		out[m] = 1
	}
	return out
}

// TestServiceRules: a source services match is an address set of the
// Service's endpoints, a destination one a named-port set of their
// (address, protocol, port) (of the rule's protocol when it has one);
// both are empty, so match nothing, until the Service's record comes;
// a change of endpoints writes set members only, never a chain; the
// record's removal empties the sets; Explain sees the members.
func TestServiceRules(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	mustPolicy(t, c, `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  types: [Ingress, Egress]
  ingress: [{action: Allow, source: {services: {name: clients}}}]
  egress: [{action: Allow, protocol: TCP, destination: {services: {name: db, namespace: data}}}, {action: Deny, destination: {services: {name: db, namespace: data}}}]
`)
	c.SetEndpoint(ep("w1", true, "10.0.0.1", map[string]string{"app": "web"}))
	src := addrSet(serviceMatcher("prod/clients")).name
	dstTCP := namedPortSet(serviceMatcher("data/db"), 6, "").name
	dstAny := namedPortSet(serviceMatcher("data/db"), 0, "").name
	for _, n := range []string{src, dstTCP, dstAny} {
		if m, ok := s.sets[n]; !ok || len(m) != 0 {
			t.Fatalf("set %s before any record: %v (present %t); sets %v", n, m, ok, keys(s.sets))
		}
	}
	in := s.chains["pi-np:prod/web"]
	if len(in) != 1 || !slices.Equal(in[0].Src.Sets, []string{src}) || in[0].Src.NamedPortSet != "" {
		t.Fatalf("ingress chain %+v", in)
	}
	out := s.chains["po-np:prod/web"]
	if len(out) != 2 || out[0].Dst.NamedPortSet != dstTCP || out[1].Dst.NamedPortSet != dstAny || len(out[0].Dst.Sets) != 0 {
		t.Fatalf("egress chain %+v", out)
	}

	s.ops = nil
	if err := c.SetServiceEndpoints("prod/clients", svcRecord("prod", "clients",
		api.ServiceSubset{Addresses: []string{"10.0.1.1", "fd00::1"}, Ports: []api.ServicePort{svcPort("TCP", 80)}})); err != nil {
		t.Fatal(err)
	}
	if err := c.SetServiceEndpoints("data/db", svcRecord("data", "db",
		api.ServiceSubset{Addresses: []string{"10.0.2.1"}, Ports: []api.ServicePort{svcPort("TCP", 5432), svcPort("UDP", 53)}},
		api.ServiceSubset{Addresses: []string{"10.0.2.2", "10.0.2.1"}, Ports: []api.ServicePort{svcPort("TCP", 5433)}})); err != nil {
		t.Fatal(err)
	}
	want := map[string]map[nftdp.Member]int{
		src:    memberSet(t, "10.0.1.1", "fd00::1"),
		dstTCP: memberSet(t, "10.0.2.1 tcp 5432", "10.0.2.1 tcp 5433", "10.0.2.2 tcp 5433"),
		dstAny: memberSet(t, "10.0.2.1 tcp 5432", "10.0.2.1 udp 53", "10.0.2.1 tcp 5433", "10.0.2.2 tcp 5433"),
	}
	for n, w := range want {
		if !mapsEqual(s.sets[n], w) {
			t.Errorf("set %s = %v, want %v", n, s.sets[n], w)
		}
	}
	for _, o := range s.ops {
		if !strings.HasPrefix(o, "member ") {
			t.Errorf("a record wrote more than members: %v", s.ops)
			break
		}
	}

	// Endpoints change: only the difference is written.
	s.ops = nil
	if err := c.SetServiceEndpoints("prod/clients", svcRecord("prod", "clients",
		api.ServiceSubset{Addresses: []string{"10.0.1.1", "10.0.1.2"}, Ports: []api.ServicePort{svcPort("TCP", 80)}})); err != nil {
		t.Fatal(err)
	}
	if got, w := slices.Sorted(slices.Values(s.ops)), []string{"-member fd00::1/128", "member 10.0.1.2/32"}; !slices.Equal(got, w) {
		t.Errorf("endpoints changed: ops %v, want %v", got, w)
	}

	// Explain sees the Service's members like the kernel's sets.
	r1 := netip.MustParseAddr("10.0.1.2")
	c.SetEndpoint(Endpoint{Key: "r1", Namespace: "prod", IPs: []netip.Prefix{netip.PrefixFrom(r1, 32)}})
	x := c.Explain(Flow{Src: r1, Dst: netip.MustParseAddr("10.0.0.1"), Proto: 6, SrcPort: 40000, DstPort: 80, ICMPType: -1, ICMPCode: -1})
	if !x.Ingress.Allowed || x.Ingress.Rule.ID != "pi-np:prod/web/0" {
		t.Errorf("explain from a Service endpoint: %+v", x.Ingress)
	}
	x = c.Explain(Flow{Src: netip.MustParseAddr("10.0.1.9"), Dst: netip.MustParseAddr("10.0.0.1"), Proto: 6, SrcPort: 40000, DstPort: 80, ICMPType: -1, ICMPCode: -1})
	if x.Ingress.Allowed {
		t.Errorf("explain from outside the Service: %+v", x.Ingress)
	}
	x = c.Explain(Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.2.2"), Proto: 6, SrcPort: 40000, DstPort: 5433, ICMPType: -1, ICMPCode: -1})
	if !x.Egress.Allowed || x.Egress.Rule.ID != "po-np:prod/web/0" {
		t.Errorf("explain to a Service port: %+v", x.Egress)
	}
	x = c.Explain(Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.2.2"), Proto: 6, SrcPort: 40000, DstPort: 5432, ICMPType: -1, ICMPCode: -1})
	if x.Egress.Allowed {
		t.Errorf("explain to a port that address does not serve: %+v", x.Egress)
	}

	// A bad record is refused naming the field; nothing changes.
	s.ops = nil
	err := c.SetServiceEndpoints("prod/clients", svcRecord("prod", "clients", api.ServiceSubset{Addresses: []string{"10.0.1.300"}}))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "spec.subsets[0].addresses[0]") || len(s.ops) != 0 {
		t.Errorf("bad record: %v, ops %v", err, s.ops)
	}

	// The record goes: the sets empty (the rules match nothing), stay.
	c.DeleteServiceEndpoints("data/db")
	if len(s.sets[dstTCP]) != 0 || len(s.sets[dstAny]) != 0 {
		t.Errorf("record deleted: %v %v", s.sets[dstTCP], s.sets[dstAny])
	}
	// The policy goes and comes back: its sets are made again, filled.
	c.DeletePolicy("np:prod/web")
	if _, ok := s.sets[src]; ok {
		t.Errorf("set %s outlived its policy", src)
	}
	mustPolicy(t, c, `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {services: {name: clients}}}]
`)
	if w := memberSet(t, "10.0.1.1", "10.0.1.2"); !mapsEqual(s.sets[src], w) {
		t.Errorf("re-made set %v, want %v", s.sets[src], w)
	}
}

// TestServiceRulesRefused: what the calculator cannot honour is refused
// naming the field, even when it did not come through api validation.
func TestServiceRulesRefused(t *testing.T) {
	c := NewCalc(newRecSink(), LogConfig{})
	sm := &api.ServiceMatch{Name: "db"}
	for _, tc := range []struct {
		name    string
		p       api.Policy
		mention string
	}{
		{"global without namespace", &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "g"}, Spec: api.GlobalNetworkPolicySpec{PolicySpec: api.PolicySpec{
			Egress: []api.Rule{{Action: api.ActionAllow, Destination: api.EntityRule{Services: sm}}}}}}, "spec.egress[0].destination.services.namespace"},
		{"with a selector", &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "n", Namespace: "a"}, Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{
			Ingress: []api.Rule{{Action: api.ActionAllow, Source: api.EntityRule{Services: sm, Selector: "all()"}}}}}}, "spec.ingress[0].source.services"},
		{"with destination ports", &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "n", Namespace: "a"}, Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{
			Egress: []api.Rule{{Action: api.ActionAllow, Protocol: &api.Protocol{Name: "TCP"}, Destination: api.EntityRule{Services: sm, Ports: []api.Port{{MinPort: 80, MaxPort: 80}}}}}}}}, "spec.egress[0].destination.ports"},
	} {
		err := c.SetPolicy(tc.p)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.mention) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func mapsEqual(a, b map[nftdp.Member]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// BenchmarkServiceEndpointsChange: the calculator's cost of one
// Service's endpoints changing (one of 20 addresses replaced) with 500
// policies each naming its own Service in an egress rule and an ingress
// rule, all active on a local endpoint (1,000 Service sets, 10,000
// members).
func BenchmarkServiceEndpointsChange(b *testing.B) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	const n = 500
	rec := func(i, gen int) *api.ServiceEndpoints {
		sub := api.ServiceSubset{Ports: []api.ServicePort{svcPort("TCP", 8080)}}
		for j := 0; j < 20; j++ {
			last := 0
			if j == 19 {
				last = gen % 2 * 100
			}
			sub.Addresses = append(sub.Addresses, netip.AddrFrom4([4]byte{10, byte(i / 256), byte(i % 256), byte(j + last)}).String())
		}
		return svcRecord("prod", fmt.Sprintf("svc-%d", i), sub)
	}
	for i := 0; i < n; i++ {
		d, err := api.Decode([]byte(fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: p%d, namespace: prod}
spec:
  selector: app == 'web'
  ingress: [{action: Allow, source: {services: {name: svc-%d}}}]
  egress: [{action: Allow, destination: {services: {name: svc-%d}}}]
`, i, i, i)))
		if err != nil {
			b.Fatal(err)
		}
		if err := c.SetPolicy(d.Resources[0].(api.Policy)); err != nil {
			b.Fatal(err)
		}
		if err := c.SetServiceEndpoints(fmt.Sprintf("prod/svc-%d", i), rec(i, 0)); err != nil {
			b.Fatal(err)
		}
	}
	c.SetEndpoint(ep("w1", true, "10.99.0.1", map[string]string{"app": "web"}))
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		i := k % n
		if err := c.SetServiceEndpoints(fmt.Sprintf("prod/svc-%d", i), rec(i, k/n+1)); err != nil {
			b.Fatal(err)
		}
		s.ops = s.ops[:0]
	}
}

// TestServiceGuards: policies whose every ingress rule names a Service
// are guarded like selector rules (one lookup skips a piece of them for
// a peer in none of the Services); each guard holds its Services'
// members and follows them as they change, so a Deny naming a Service
// is never skipped for one of its endpoints.
func TestServiceGuards(t *testing.T) {
	s := newRecSink()
	c := NewCalc(s, LogConfig{})
	const n = 6
	for i := 0; i < n; i++ {
		mustPolicy(t, c, fmt.Sprintf(`apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: deny-%d, namespace: prod}
spec:
  order: %d
  selector: app == 'web'
  ingress: [{action: Deny, source: {services: {name: svc-%d}}}]
`, i, i, i))
	}
	c.SetEndpoint(ep("w1", true, "10.0.0.1", map[string]string{"app": "web"}))
	addrs := map[string][]string{}
	set := func(i int, as ...string) {
		t.Helper()
		key := fmt.Sprintf("prod/svc-%d", i)
		addrs[key] = as
		if err := c.SetServiceEndpoints(key, svcRecord("prod", fmt.Sprintf("svc-%d", i),
			api.ServiceSubset{Addresses: as, Ports: []api.ServicePort{svcPort("TCP", 80)}})); err != nil {
			t.Fatal(err)
		}
	}
	// check: every guard holds exactly the members of the Services of
	// its sets.
	check := func(why string) {
		t.Helper()
		covered := 0
		for name, g := range c.guards {
			var want []string
			for _, sp := range g.spec.sets {
				key, ok := serviceOf(sp)
				if !ok {
					t.Fatalf("guard %s has a set %s naming no Service", name, sp.name)
				}
				want = append(want, addrs[key]...)
				covered++
			}
			if w := memberSet(t, want...); !mapsEqual(s.sets[name], w) {
				t.Errorf("%s: guard %s = %v, want %v", why, name, s.sets[name], w)
			}
		}
		if covered < 2 {
			t.Fatalf("guards cover %d Service sets (%d guards): the test needs a guarded run", covered, len(c.guards))
		}
	}
	for i := 0; i < n; i++ {
		set(i, fmt.Sprintf("10.0.1.%d", i), fmt.Sprintf("fd00::%d", i))
	}
	check("filled")
	for i := 0; i < n; i++ {
		set(i, fmt.Sprintf("10.0.2.%d", i))
	}
	check("changed")
	for i := 0; i < n; i += 2 {
		c.DeleteServiceEndpoints(fmt.Sprintf("prod/svc-%d", i))
		delete(addrs, fmt.Sprintf("prod/svc-%d", i))
	}
	check("deleted")
}
