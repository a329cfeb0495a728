package policy

import (
	"errors"
	"slices"
	"testing"
)

// TestUnreadableDenyReach: the deny for a global kind's unreadable
// record goes first on every workload, of a namespace or of none, and
// on the host endpoints' normal and forward chains (an unreadable tier
// or set could be what protects the host); a NetworkPolicy's goes on
// its namespace's workloads alone, or, its key naming no namespace, on
// everything.
func TestUnreadableDenyReach(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	labels := map[string]string{"role": "edge"}
	c.SetEndpoint(ep("a", true, "10.0.0.1", labels)) // namespace prod
	none := ep("b", true, "10.0.0.2", labels)
	none.Namespace = ""
	c.SetEndpoint(none)
	dev := ep("c", true, "10.0.0.3", labels)
	dev.Namespace = "dev"
	c.SetEndpoint(dev)
	c.SetHostEndpoint(testHostEP("n1-eth0", "eth0", true, labels, "192.0.2.1/32"))
	mustPolicy(t, c, gnpYAML("normal", "1", "default", "  selector: role == 'edge'\n  ingress: [{action: Allow}]"))

	why := errors.New("for the test")
	if err := c.setUnreadable("GlobalNetworkPolicy", "broken", why); err != nil {
		t.Fatal(err)
	}
	deny := "pi-" + UnreadableKey("GlobalNetworkPolicy", "broken")
	for _, name := range []string{"calia", "calib", "calic"} {
		if got := s.jumps(s.eps[name][1]); len(got) == 0 || got[0] != deny {
			t.Errorf("%s ingress jumps %v: want the unreadable record's deny first", name, got)
		}
	}
	h := s.hosts.Endpoints[0]
	for chain, want := range map[string]string{h.In: deny, h.Out: "po-" + UnreadableKey("GlobalNetworkPolicy", "broken"), h.FwdIn: deny} {
		if got := s.jumps(chain); len(got) == 0 || got[0] != want {
			t.Errorf("host endpoint chain %s jumps %v: want %s first", chain, got, want)
		}
	}

	c.clearUnreadable("GlobalNetworkPolicy", "broken")
	if err := c.setUnreadable("NetworkPolicy", "dev.broken", why); err != nil {
		t.Fatal(err)
	}
	npDeny := "pi-" + UnreadableKey("NetworkPolicy", "dev.broken")
	if got := s.jumps(s.eps["calic"][1]); len(got) == 0 || got[0] != npDeny {
		t.Errorf("dev's workload ingress jumps %v: want the NetworkPolicy's deny first", got)
	}
	for _, name := range []string{"calia", "calib"} {
		if got := s.jumps(s.eps[name][1]); slices.Contains(got, npDeny) || slices.Contains(got, deny) {
			t.Errorf("%s (not in dev) ingress jumps %v: a deny that is not its", name, got)
		}
	}
	if got := s.jumps(s.hosts.Endpoints[0].In); !slices.Equal(got, []string{"pi-gnp:normal"}) {
		t.Errorf("host endpoint ingress jumps %v with a NetworkPolicy's deny: want its own policy alone", got)
	}
	if err := c.setUnreadable("NetworkPolicy", "nodot", why); err != nil {
		t.Fatal(err)
	}
	if got := c.unreadableList(); len(got) != 2 || got[1].Name != "nodot" || got[1].Scope != "all workload and host endpoints" {
		t.Errorf("a NetworkPolicy key without a namespace: %+v, want the deny of everything", got)
	}
}

// TestUnreadableHostDenyReach: the deny for an unreadable HostEndpoint
// goes first on the chains of the host endpoint standing in its place
// (labelled UnreadableHostLabel), normal and forward, and on no
// workload, even one carrying that label.
func TestUnreadableHostDenyReach(t *testing.T) {
	s := &hostRecSink{recSink: newRecSink()}
	c := NewCalc(s, LogConfig{})
	marked := map[string]string{UnreadableHostLabel: "", "role": "edge"}
	c.SetEndpoint(ep("a", true, "10.0.0.1", marked))
	c.SetHostEndpoint(testHostEP("stand-in", "eth1", true, marked, "192.0.2.1/32"))
	mustPolicy(t, c, gnpYAML("normal", "1", "default", "  selector: role == 'edge'\n  ingress: [{action: Allow}]"))
	if err := c.setUnreadableHost("stand-in", UnreadableHost{Iface: "eth1"}, true, errors.New("for the test")); err != nil {
		t.Fatal(err)
	}
	key := UnreadableKey("HostEndpoint", "stand-in")
	h := s.hosts.Endpoints[0]
	for chain, want := range map[string]string{h.In: "pi-" + key, h.Out: "po-" + key, h.FwdIn: "pi-" + key} {
		if got := s.jumps(chain); len(got) == 0 || got[0] != want {
			t.Errorf("host endpoint chain %s jumps %v: want %s first", chain, got, want)
		}
	}
	if got := s.jumps(s.eps["calia"][1]); slices.Contains(got, "pi-"+key) || !slices.Contains(got, "pi-gnp:normal") {
		t.Errorf("workload ingress jumps %v: want its own policy, not the host endpoint's deny", got)
	}
	if got := c.unreadableList(); len(got) != 1 || got[0].Scope != "this node's host traffic on eth1" {
		t.Errorf("unreadable list %+v", got)
	}
	c.clearUnreadable("HostEndpoint", "stand-in")
	if got := s.jumps(s.hosts.Endpoints[0].In); slices.Contains(got, "pi-"+key) {
		t.Errorf("host endpoint ingress jumps %v after the deny was cleared", got)
	}
}
