package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestHostEndpointShadowedResolution: of two host endpoints for one
// interface (named, or found there by address) and of two "*" ones,
// only the one whose name sorts first is dispatched, whatever order
// they came in; the other is reported, naming both and the interface;
// the log reader names the one that applies; when it goes, the other
// takes over and the warning is gone.
func TestHostEndpointShadowedResolution(t *testing.T) {
	for _, order := range [][]string{{"n1-a", "n1-b"}, {"n1-b", "n1-a"}} {
		s := &hostRecSink{recSink: newRecSink()}
		c := NewCalc(s, LogConfig{})
		for _, name := range order {
			c.SetHostEndpoint(testHostEP(name, "eth0", true, nil))
			c.SetHostEndpoint(testHostEP("all-"+name, "*", true, nil))
		}
		if len(s.hosts.Endpoints) != 2 {
			t.Fatalf("order %v: dispatched %+v, want one endpoint for eth0 and one for *", order, s.hosts.Endpoints)
		}
		want := []HostEndpointWarning{
			{Endpoint: "all-n1-b", Node: "n1", Iface: "*", ShadowedBy: "all-n1-a"},
			{Endpoint: "n1-b", Node: "n1", Iface: "eth0", ShadowedBy: "n1-a"},
		}
		got := c.HostEndpointWarnings()
		if !slices.EqualFunc(got, want, warningEqual) {
			t.Fatalf("order %v: warnings %+v, want %+v", order, got, want)
		}
		for _, name := range []string{"n1-b", "n1-a", "eth0"} {
			if !strings.Contains(got[1].String(), name) {
				t.Errorf("warning %q does not name %s", got[1], name)
			}
		}
		if ref, ok := c.Index().Endpoint("eth0"); !ok || ref.Key != HostEndpointKey("n1-a") {
			t.Errorf("order %v: the log reader names %+v for eth0, want n1-a", order, ref)
		}
		c.DeleteHostEndpoint(HostEndpointKey("n1-a"))
		c.DeleteHostEndpoint(HostEndpointKey("all-n1-a"))
		if w := c.HostEndpointWarnings(); len(w) != 0 {
			t.Errorf("order %v: after the first went: warnings %+v, want none", order, w)
		}
		if ref, ok := c.Index().Endpoint("eth0"); !ok || ref.Key != HostEndpointKey("n1-b") {
			t.Errorf("order %v: after n1-a went the log reader names %+v for eth0, want n1-b", order, ref)
		}
		if len(s.hosts.Endpoints) != 2 {
			t.Errorf("order %v: after the first went: dispatched %+v, want n1-b and all-n1-b", order, s.hosts.Endpoints)
		}
		c.DeleteHostEndpoint(HostEndpointKey("n1-b"))
		if _, ok := c.Index().Endpoint("eth0"); ok {
			t.Errorf("order %v: eth0 still indexed with no endpoint for it", order)
		}
	}
}

// TestHostEndpointDoNotTrackOnWildcardWarned: a doNotTrack policy that
// selects a "*" endpoint is reported (by policy and endpoint), one that
// selects a named endpoint is not, nor is a normal policy on "*".
func TestHostEndpointDoNotTrackOnWildcardWarned(t *testing.T) {
	c := NewCalc(&hostRecSink{recSink: newRecSink()}, LogConfig{})
	c.SetHostEndpoint(testHostEP("n1-all", "*", true, map[string]string{"all": "yes"}))
	c.SetHostEndpoint(testHostEP("n1-eth0", "eth0", true, map[string]string{"edge": "yes"}))
	mustPolicy(t, c, gnpYAML("untracked-all", "1", "default", "  selector: all == 'yes'\n  applyOnForward: true\n  doNotTrack: true\n  ingress: [{action: Allow}]"))
	mustPolicy(t, c, gnpYAML("untracked-edge", "1", "default", "  selector: edge == 'yes'\n  applyOnForward: true\n  doNotTrack: true\n  ingress: [{action: Allow}]"))
	mustPolicy(t, c, gnpYAML("normal-all", "1", "default", "  selector: all == 'yes'\n  ingress: [{action: Allow}]"))
	want := []HostEndpointWarning{{Endpoint: "n1-all", Node: "n1", Iface: "*", IgnoredDoNotTrack: []string{"gnp:untracked-all"}}}
	got := c.HostEndpointWarnings()
	if !slices.EqualFunc(got, want, warningEqual) {
		t.Fatalf("warnings %+v, want %+v", got, want)
	}
	if s := got[0].String(); !strings.Contains(s, "gnp:untracked-all") || !strings.Contains(s, "n1-all") || !strings.Contains(s, "ignored") {
		t.Errorf("warning %q: want the policy, the endpoint and that it is ignored", s)
	}
	c.DeletePolicy("gnp:untracked-all")
	if w := c.HostEndpointWarnings(); len(w) != 0 {
		t.Errorf("after the policy went: %+v, want none", w)
	}
}

// TestModelHostEndpointWarnings: a model built from the datastore
// (routedctl's) sees every node's host endpoints given with
// SetHostEndpointOfNode (SetResource leaves them out): two for one
// interface of one node are reported, the same interface name on two
// nodes is not.
func TestModelHostEndpointWarnings(t *testing.T) {
	m := NewModel()
	var heps []*api.HostEndpoint
	for _, h := range []struct{ name, node, iface string }{{"a", "n1", "eth0"}, {"b", "n1", "eth0"}, {"c", "n2", "eth0"}} {
		heps = append(heps, &api.HostEndpoint{Metadata: api.ObjectMeta{Name: h.name}, Spec: api.HostEndpointSpec{Node: h.node, InterfaceName: h.iface}})
		if err := m.SetResource(heps[len(heps)-1]); err != nil {
			t.Fatal(err)
		}
	}
	if eps := m.Endpoints(); len(eps) != 0 {
		t.Fatalf("SetResource took HostEndpoints %v: a flow model would name a host's address as an endpoint", eps)
	}
	for _, he := range heps {
		if err := m.SetHostEndpointOfNode(he); err != nil {
			t.Fatal(err)
		}
	}
	want := []HostEndpointWarning{{Endpoint: "b", Node: "n1", Iface: "eth0", ShadowedBy: "a"}}
	if got := m.HostEndpointWarnings(); !slices.EqualFunc(got, want, warningEqual) {
		t.Errorf("warnings %+v, want %+v", got, want)
	}
}

func warningEqual(a, b HostEndpointWarning) bool {
	return a.Endpoint == b.Endpoint && a.Node == b.Node && a.Iface == b.Iface && a.ShadowedBy == b.ShadowedBy &&
		slices.Equal(a.IgnoredDoNotTrack, b.IgnoredDoNotTrack)
}
