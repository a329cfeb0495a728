package policy

import (
	"slices"
	"testing"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// byIPHostEP is a host endpoint of n1 that names no interface, found on
// the interfaces given.
func byIPHostEP(name string, found ...string) HostEndpoint {
	h := testHostEP(name, "", true, nil, "192.0.2.1/32", "2001:db8::1/128")
	h.Found = found
	return h
}

// dispatched is the host dispatch's interfaces, each with the chain
// its traffic to the host goes to.
func dispatched(s *hostRecSink) map[string]string {
	out := map[string]string{}
	for _, e := range s.hosts.Endpoints {
		out[e.Iface] = e.In
	}
	return out
}

// TestHostEndpointByIPEveryInterface: an endpoint found by its
// expectedIPs governs every interface holding one of them, with the
// same chains, as in Calico; it follows the interfaces it is found on;
// per interface, the endpoint whose name sorts first governs (a named
// match is not preferred: Calico's resolveHostEndpoints), so an
// endpoint can be shadowed on one interface and govern another, with a
// warning for that interface only; a named endpoint is never matched
// by address.
func TestHostEndpointByIPEveryInterface(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})

	c.SetHostEndpoint(byIPHostEP("n1-m", "eth2", "eth1", "eth1", ""))
	got := dispatched(s)
	if len(got) != 2 || got["eth1"] == "" || got["eth1"] != got["eth2"] {
		t.Fatalf("found on eth1 and eth2: dispatched %v, want both to one endpoint's chains", got)
	}
	if ref, ok := c.Index().Endpoint("eth2"); !ok || ref.Key != HostEndpointKey("n1-m") {
		t.Errorf("the log reader names %+v for eth2, want n1-m", ref)
	}

	// Moved: eth1 no longer holds an address, eth3 does.
	c.SetHostEndpoint(byIPHostEP("n1-m", "eth2", "eth3"))
	if got := dispatched(s); len(got) != 2 || got["eth2"] == "" || got["eth3"] == "" || got["eth1"] != "" {
		t.Fatalf("moved to eth2 and eth3: dispatched %v", got)
	}
	if _, ok := c.Index().Endpoint("eth1"); ok {
		t.Error("eth1 still indexed after the address left it")
	}

	// A named endpoint sorting after: shadowed on eth2, no change.
	c.SetHostEndpoint(testHostEP("n1-z", "eth2", true, nil))
	want := []HostEndpointWarning{{Endpoint: "n1-z", Node: "n1", Iface: "eth2", ShadowedBy: "n1-m"}}
	if w := c.HostEndpointWarnings(); !slices.EqualFunc(w, want, warningEqual) {
		t.Fatalf("warnings %+v, want %+v", w, want)
	}
	// A named endpoint sorting first: it governs eth2, n1-m keeps eth3.
	c.SetHostEndpoint(testHostEP("n1-a", "eth2", true, nil))
	got = dispatched(s)
	if len(got) != 2 || got["eth2"] == "" || got["eth3"] == "" {
		t.Fatalf("n1-a on eth2, n1-m on eth3: dispatched %v", got)
	}
	for iface, want := range map[string]string{"eth2": "n1-a", "eth3": "n1-m"} {
		if ref, ok := c.Index().Endpoint(iface); !ok || ref.Key != HostEndpointKey(want) {
			t.Errorf("the log reader names %+v for %s, want %s", ref, iface, want)
		}
	}
	want = []HostEndpointWarning{
		{Endpoint: "n1-m", Node: "n1", Iface: "eth2", ShadowedBy: "n1-a"},
		{Endpoint: "n1-z", Node: "n1", Iface: "eth2", ShadowedBy: "n1-a"},
	}
	if w := c.HostEndpointWarnings(); !slices.EqualFunc(w, want, warningEqual) {
		t.Fatalf("warnings %+v, want %+v", w, want)
	}

	// A named endpoint is matched by name only, whatever Found says.
	named := testHostEP("n1-b", "eth9", true, nil, "192.0.2.1/32")
	named.Found = []string{"eth3"}
	c.SetHostEndpoint(named)
	if ref, ok := c.Index().Endpoint("eth3"); !ok || ref.Key != HostEndpointKey("n1-m") || dispatched(s)["eth9"] == "" {
		t.Fatalf("named eth9 with Found eth3: dispatched %v, eth3 is %+v's", dispatched(s), ref)
	}
	c.DeleteHostEndpoint(named.Key)

	// Found nowhere: it polices nothing, and the others are unchanged.
	c.SetHostEndpoint(byIPHostEP("n1-m"))
	if got := dispatched(s); len(got) != 1 || got["eth2"] == "" {
		t.Fatalf("n1-m found nowhere: dispatched %v, want eth2 (n1-a) only", got)
	}
	want = []HostEndpointWarning{{Endpoint: "n1-z", Node: "n1", Iface: "eth2", ShadowedBy: "n1-a"}}
	if w := c.HostEndpointWarnings(); !slices.EqualFunc(w, want, warningEqual) {
		t.Fatalf("warnings %+v, want %+v", w, want)
	}
	for _, k := range []string{"n1-a", "n1-z", "n1-m"} {
		c.DeleteHostEndpoint(HostEndpointKey(k))
	}
	if len(s.hosts.Endpoints) != 0 {
		t.Errorf("all gone: dispatched %+v", s.hosts.Endpoints)
	}
}

// TestHostEndpointByIPWildcardApart: an endpoint found by address does
// not shadow a "*" endpoint (which keeps every other interface), and
// its untracked (doNotTrack) chains exist on each interface it governs.
func TestHostEndpointByIPWildcardApart(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	labels := map[string]string{"role": "edge"}
	c.SetHostEndpoint(testHostEP("n1-all", nftdp.WildcardIface, true, nil))
	h := byIPHostEP("n1-b", "eth1", "eth2")
	h.Labels = labels
	c.SetHostEndpoint(h)
	mustPolicy(t, c, gnpYAML("untracked", "1", "default", "  selector: role == 'edge'\n  applyOnForward: true\n  doNotTrack: true\n  ingress: [{action: Allow}]"))
	if w := c.HostEndpointWarnings(); len(w) != 0 {
		t.Errorf("warnings %+v, want none", w)
	}
	var raw []string
	for _, e := range s.hosts.Endpoints {
		if e.Iface != nftdp.WildcardIface && e.RawIn != "" {
			raw = append(raw, e.Iface)
		}
	}
	if !slices.Equal(raw, []string{"eth1", "eth2"}) || len(s.hosts.Endpoints) != 3 {
		t.Errorf("dispatched %+v, want eth1 and eth2 with untracked chains, and *", s.hosts.Endpoints)
	}
}
