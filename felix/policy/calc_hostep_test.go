package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// hostRecSink is a recSink that also takes host endpoints.
type hostRecSink struct {
	*recSink
	hosts nftdp.HostEndpoints
}

func (s *hostRecSink) SetHostEndpoints(h nftdp.HostEndpoints) { s.hosts = h }

func (s *hostRecSink) jumps(chain string) []string {
	var out []string
	for _, r := range s.chains[chain] {
		if r.Action == nftdp.ActJump {
			out = append(out, r.Target)
		}
	}
	return out
}

func testHostEP(name, iface string, local bool, labels map[string]string, ips ...string) HostEndpoint {
	h := HostEndpoint{Key: HostEndpointKey(name), Iface: iface, Local: local, Node: "n1", Labels: labels}
	for _, ip := range ips {
		h.IPs = append(h.IPs, netip.MustParsePrefix(ip))
	}
	return h
}

// TestHostEndpointChains: doNotTrack and preDNAT policies go to host
// endpoints only (never to a pod their selector picks), each context
// gets the policies Calico gives it, their Allow is rewritten for their
// hook, "*" has no untracked chain, and deleting the endpoint leaves
// no chain or dispatch behind.
func TestHostEndpointChains(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	labels := map[string]string{"role": "edge"}
	c.SetEndpoint(ep("a", true, "10.0.0.1", labels))
	c.SetHostEndpoint(testHostEP("n1-eth0", "eth0", true, labels, "192.0.2.1/32"))
	for _, p := range []string{
		gnpYAML("normal", "1", "default", "  selector: role == 'edge'\n  ingress: [{action: Allow}]"),
		gnpYAML("forward", "2", "default", "  selector: role == 'edge'\n  applyOnForward: true\n  ingress: [{action: Allow}]"),
		gnpYAML("prednat", "3", "default", "  selector: role == 'edge'\n  applyOnForward: true\n  preDNAT: true\n  ingress: [{action: Allow}]"),
		gnpYAML("untracked", "4", "default", "  selector: role == 'edge'\n  applyOnForward: true\n  doNotTrack: true\n  ingress: [{action: Allow}]\n  egress: [{action: Allow}]"),
	} {
		mustPolicy(t, c, p)
	}
	pod := s.eps["calia"]
	if got := s.jumps(pod[1]); !slices.Equal(got, []string{"pi-gnp:normal", "pi-gnp:forward"}) {
		t.Errorf("pod ingress jumps %v: want the normal and applyOnForward policies only", got)
	}
	if len(s.hosts.Endpoints) != 1 {
		t.Fatalf("host endpoints %+v", s.hosts)
	}
	h := s.hosts.Endpoints[0]
	for chain, want := range map[string][]string{
		h.In: {"pi-gnp:normal", "pi-gnp:forward"}, h.FwdIn: {"pi-gnp:forward"}, h.PreDNAT: {"pi-gnp:prednat"},
		h.RawIn: {"pi-gnp:untracked"}, h.RawOut: {"po-gnp:untracked"},
	} {
		if got := s.jumps(chain); !slices.Equal(got, want) {
			t.Errorf("%s jumps %v, want %v", chain, got, want)
		}
	}
	if h.FwdOut != "" || h.Out == "" || len(s.jumps(h.Out)) != 0 {
		t.Errorf("egress: %+v (out jumps %v): own chain without policy (drops), no forward chain", h, s.jumps(h.Out))
	}
	for chain, want := range map[string]nftdp.Action{"pi-gnp:prednat": nftdp.ActMarkAccept, "pi-gnp:untracked": nftdp.ActNotrack, "pi-gnp:normal": nftdp.ActAccept} {
		if got := s.chains[chain][0].Action; got != want {
			t.Errorf("%s: Allow is %v, want %v", chain, got, want)
		}
	}
	if last := s.chains[h.PreDNAT][len(s.chains[h.PreDNAT])-1]; last.Action == nftdp.ActDrop {
		t.Errorf("preDNAT chain ends with a drop: what no rule decides must go on to normal policy")
	}

	if ref, ok := c.Index().Endpoint("eth0"); !ok || ref.Key != HostEndpointKey("n1-eth0") {
		t.Errorf("the rule index names %+v for eth0", ref)
	}
	c.SetHostEndpoint(testHostEP("n1-eth0", "*", true, labels, "192.0.2.1/32"))
	if _, ok := c.Index().Endpoint("eth0"); ok {
		t.Error("the rule index still names eth0 after the endpoint became \"*\"")
	}
	if h := s.hosts.Endpoints[0]; h.RawIn != "" || h.RawOut != "" || h.PreDNAT == "" {
		t.Errorf("\"*\" endpoint %+v: no untracked chains (Calico), preDNAT kept", h)
	}

	c.DeleteHostEndpoint(HostEndpointKey("n1-eth0"))
	if len(s.hosts.Endpoints) != 0 {
		t.Errorf("host endpoints after delete: %+v", s.hosts)
	}
	for name := range s.chains {
		if strings.HasPrefix(name, "hep-") || name == "pi-gnp:prednat" || strings.HasSuffix(name, "untracked") {
			t.Errorf("chain %s left after the host endpoint went", name)
		}
	}
}

// TestHostEndpointInSets: a host endpoint's expected addresses are
// members of the sets whose selectors pick it, on every node (a remote
// one too), and leave them with it.
func TestHostEndpointInSets(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	c.SetEndpoint(ep("a", true, "10.0.0.1", map[string]string{"app": "db"}))
	mustPolicy(t, c, gnpYAML("from-edge", "1", "default", "  selector: app == 'db'\n  ingress: [{action: Allow, source: {selector: role == 'edge'}}]"))
	c.SetHostEndpoint(testHostEP("n2-eth0", "eth0", false, map[string]string{"role": "edge"}, "192.0.2.2/32", "2001:db8::2/128"))
	var members []string
	for _, m := range s.sets {
		for k := range m {
			members = append(members, k.Prefix.String())
		}
	}
	slices.Sort(members)
	if !slices.Equal(members, []string{"192.0.2.2/32", "2001:db8::2/128"}) {
		t.Errorf("set members %v, want the remote host endpoint's addresses", members)
	}
	if len(s.hosts.Endpoints) != 0 {
		t.Errorf("a remote host endpoint is dispatched here: %+v", s.hosts)
	}
	c.DeleteHostEndpoint(HostEndpointKey("n2-eth0"))
	for name, m := range s.sets {
		if len(m) != 0 {
			t.Errorf("set %s keeps %v after the host endpoint went", name, m)
		}
	}
}

// TestProfileCreatedAfterEndpoint: a profile that an endpoint (a pod or
// a host endpoint) names but that arrives after it is jumped to once it
// exists, and no longer once it is gone (its chains were rendered
// without it, and its labels, here none, did not change).
func TestProfileCreatedAfterEndpoint(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	e := ep("a", true, "10.0.0.1", nil)
	e.Profiles = []string{"late"}
	c.SetEndpoint(e)
	h := testHostEP("h", "eth0", true, nil, "192.0.2.1/32")
	h.Profiles = []string{"late"}
	c.SetHostEndpoint(h)
	chains := func() map[string][]string {
		return map[string][]string{"pod": s.jumps(s.eps["calia"][1]), "host": s.jumps(s.hosts.Endpoints[0].In)}
	}
	for who, j := range chains() {
		if len(j) != 0 {
			t.Errorf("%s jumps %v before the profile exists", who, j)
		}
	}
	if err := c.SetProfile(&api.Profile{Metadata: api.ObjectMeta{Name: "late"}, Spec: api.ProfileSpec{Ingress: []api.Rule{{Action: api.ActionAllow}}}}); err != nil {
		t.Fatal(err)
	}
	for who, j := range chains() {
		if !slices.Equal(j, []string{"pri-late"}) {
			t.Errorf("%s jumps %v once the profile exists, want pri-late", who, j)
		}
	}
	c.DeleteProfile("late")
	for who, j := range chains() {
		if len(j) != 0 {
			t.Errorf("%s jumps %v after the profile went", who, j)
		}
	}
}

// TestExplainHostEndpointAddress: explain answers for workloads; a flow
// to or from a host endpoint's address says that endpoint's policy is
// not explained, instead of walking it as a pod's or calling it not
// policed, while a pod's side of the same flow is still explained.
func TestExplainHostEndpointAddress(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	labels := map[string]string{"role": "edge"}
	c.SetEndpoint(ep("a", true, "10.0.0.1", labels))
	c.SetHostEndpoint(testHostEP("n1-eth0", "eth0", true, labels, "192.0.2.1/32"))
	mustPolicy(t, c, gnpYAML("deny-edge", "1", "default", "  selector: role == 'edge'\n  ingress: [{action: Deny}]\n  egress: [{action: Allow}]"))

	x := c.Explain(Flow{Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("192.0.2.1"), Proto: 6, SrcPort: 40000, DstPort: 80, ICMPType: -1, ICMPCode: -1})
	if x.Ingress.Rule.Kind != KindHostNotExplained || x.Ingress.Endpoint != HostEndpointKey("n1-eth0") {
		t.Errorf("ingress to the host endpoint: %+v, want kind %q naming %s", x.Ingress, KindHostNotExplained, HostEndpointKey("n1-eth0"))
	}
	if !x.Egress.Policed || !x.Egress.Allowed || x.Egress.Endpoint == HostEndpointKey("n1-eth0") {
		t.Errorf("egress from the pod: %+v, want the pod's own policy (allowed)", x.Egress)
	}
	y := c.Explain(Flow{Src: netip.MustParseAddr("192.0.2.9"), Dst: netip.MustParseAddr("10.0.0.1"), Proto: 6, SrcPort: 40000, DstPort: 80, ICMPType: -1, ICMPCode: -1})
	if !y.Ingress.Policed || y.Ingress.Allowed {
		t.Errorf("ingress to the pod: %+v, want denied by deny-edge", y.Ingress)
	}
}

// TestNamespaceSelectorAllSkipsHostEndpoints: Calico reads a
// namespaceSelector of all() as "has a namespace", so neither a
// GlobalNetworkPolicy's nor a rule's all() picks a host endpoint; a
// namespace selector that holds for empty labels (!has(x)) does, as in
// Calico.
func TestNamespaceSelectorAllSkipsHostEndpoints(t *testing.T) {
	for nsSel, want := range map[string]bool{"all()": false, "!has(tenant)": true} {
		s := &hostRecSink{recSink: newRecSink()}
		c := NewCalc(s, LogConfig{})
		c.SetHostEndpoint(testHostEP("n1-eth0", "eth0", true, nil, "192.0.2.1/32"))
		mustPolicy(t, c, gnpYAML("pods-open", "1", "default", "  namespaceSelector: \""+nsSel+"\"\n  ingress: [{action: Allow}]"))
		if len(s.hosts.Endpoints) != 1 {
			t.Fatalf("host endpoints %+v", s.hosts.Endpoints)
		}
		if got := slices.Contains(s.jumps(s.hosts.Endpoints[0].In), "pi-gnp:pods-open"); got != want {
			t.Errorf("namespaceSelector %q: host endpoint's input chain jumps to the policy: %v, want %v", nsSel, got, want)
		}
	}

	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	c.SetEndpoint(ep("a", true, "10.0.0.1", map[string]string{"app": "db"}))
	c.SetEndpoint(ep("b", false, "10.0.0.2", map[string]string{"app": "web"}))
	mustPolicy(t, c, gnpYAML("from-pods", "1", "default", "  selector: app == 'db'\n  ingress: [{action: Allow, source: {namespaceSelector: all()}}]"))
	c.SetHostEndpoint(testHostEP("n2-eth0", "eth0", false, nil, "192.0.2.2/32"))
	pod := false
	for name, m := range s.sets {
		for k := range m {
			switch k.Prefix.String() {
			case "192.0.2.2/32":
				t.Errorf("set %s holds the host endpoint's address", name)
			case "10.0.0.2/32":
				pod = true
			}
		}
	}
	if !pod {
		t.Errorf("no set holds pod b's address: %v", s.sets)
	}
}
