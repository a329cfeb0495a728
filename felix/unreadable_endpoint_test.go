package felix_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// TestUnreadableEndpointKeepsItsDeny: felix's loop denies for a
// WorkloadEndpoint record that does not decode, found undecoded in a
// snapshot or reported live, and for one it refuses, naming the
// addresses the deny covers, until the record is set readable or
// deleted, or a snapshot no longer has it; a snapshot's list of
// unreadable policy records (which has no endpoints) does not end it.
// The deny covers the addresses read from the record and those of its
// previous version.
func TestUnreadableEndpointKeepsItsDeny(t *testing.T) {
	h := newHarness(t, func(c *felix.Config) { c.Features.DisablePolicy = false })
	name := api.WorkloadEndpointName("node-b", "k8s", "prod", "x", "", "eth0")
	wait := func(what, scope string) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			var got []string
			for _, r := range h.f.UnreadableRecords() {
				got = append(got, fmt.Sprintf("%s/%s (%s)", r.Kind, r.Name, r.Scope))
			}
			switch {
			case scope == "" && len(got) == 0:
				return ""
			case scope != "" && len(got) == 1 && strings.HasPrefix(got[0], "WorkloadEndpoint/"+name+" (") && strings.Contains(got[0], scope):
				return ""
			}
			return fmt.Sprintf("%s: unreadable records %v, want %q", what, got, scope)
		})
	}
	bad := []byte(`{"kind":"WorkloadEndpoint","metadata":{"name":"x"},"spec":{"node":"node-b","ipNetworks":["10.65.1.5/32"],"ports":7}}`)
	h.f.ReplaceEncoded(resources(), []feed.Encoded{feed.NewEncoded(api.KindWorkloadEndpoint, name, bad, 2)})
	h.f.ReplaceUnreadable(nil)
	wait("undecoded in a snapshot", "traffic from and to 10.65.1.5/32")

	h.f.ReplaceEncoded(resources(), nil)
	h.f.ReplaceUnreadable(nil)
	wait("gone from the next snapshot", "")

	// Live: refused (a port without a name), readable, unreadable with
	// its addresses unknown, deleted.
	w := wep(name, "node-b", "", "10.65.1.6/32")
	if api.StoreName(w) != name {
		t.Fatalf("the endpoint's name is %q, want %q", api.StoreName(w), name)
	}
	refused := *w
	refused.Spec.Ports = []api.WorkloadEndpointPort{{Port: 80}}
	h.f.SetResource(&refused)
	wait("refused", "traffic from and to 10.65.1.6/32")
	h.f.SetResource(w)
	wait("set readable", "")
	// Nothing can be read from it: its previous version's address is
	// denied, and stays denied through another unreadable write, a
	// snapshot with the same bytes, a refused write whose only address
	// is no single one (0.0.0.0/0 would deny for every pod) and a list
	// of unreadable policy records.
	unreadable := feed.Update{Kind: api.KindWorkloadEndpoint, Name: name, Unreadable: fmt.Errorf("for the test"), Value: []byte(`{"spec":`)}
	h.f.SetUnreadable(unreadable)
	wait("unreadable after a readable version", "traffic from and to 10.65.1.6/32 at")
	// Rewritten unreadable with other addresses: the last readable
	// version's and the record's own, not those of earlier unreadable
	// writes (freed, they may be another pod's now).
	reading := func(addr string) feed.Update {
		u := unreadable
		u.Value = []byte(`{"spec":{"ipNetworks":["` + addr + `"],"ports":7}}`)
		return u
	}
	h.f.SetUnreadable(reading("10.65.1.7/32"))
	wait("unreadable, reading another address", "traffic from and to 10.65.1.6/32, 10.65.1.7/32 at")
	h.f.SetUnreadable(reading("10.65.1.8/32"))
	wait("unreadable, reading a third address", "traffic from and to 10.65.1.6/32, 10.65.1.8/32 at")
	h.f.SetUnreadable(unreadable)
	wait("unreadable again", "traffic from and to 10.65.1.6/32 at")
	h.f.ReplaceEncoded(resources(), []feed.Encoded{feed.NewEncoded(api.KindWorkloadEndpoint, name, unreadable.Value, 4)})
	h.f.ReplaceUnreadable(nil) // a snapshot's policy records: not its
	wait("a snapshot with it unreadable", "traffic from and to 10.65.1.6/32 at")
	wide := *w
	wide.Spec.IPNetworks = []string{"0.0.0.0/0"}
	wide.Spec.Ports = []api.WorkloadEndpointPort{{Port: 80}}
	h.f.SetResource(&wide)
	wait("refused, for 0.0.0.0/0", "traffic from and to 10.65.1.6/32 at")
	h.f.SetResource(node("node-b", "192.0.2.2", ""))
	wait("after a node's update", "traffic from and to 10.65.1.6/32 at")
	h.f.DeleteResource(api.KindWorkloadEndpoint, name)
	wait("deleted", "")
	// Nothing known of it at all: listed.
	h.f.ReplaceEncoded(resources(), []feed.Encoded{feed.NewEncoded(api.KindWorkloadEndpoint, name, []byte(`{"spec":`), 3)})
	h.f.ReplaceUnreadable(nil)
	wait("nothing known", "no single address of it is known")
}
