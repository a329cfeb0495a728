package felix_test

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/internal/nstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/feed"
)

// hostOpenModel: eth1 is node-a's host endpoint "edge", which a policy
// opens to everything; eth0 and eth2 have none (open).
const hostOpenModel = `
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: edge, labels: {role: open}}
spec: {node: node-a, interfaceName: eth1}
` + openAllGNP

// TestUnreadableHostEndpointFailsClosed: a HostEndpoint record that
// does not decode, or that felix refuses, is not skipped (which left
// its interface open, at the latest after a restart): felix denies the
// interface salvaged from the record (every interface when none can
// be), with the failsafe ports still answered; a record of another
// node changes nothing here; the deny ends when the record is set
// again, or when a snapshot no longer has it. Real connections from
// peers behind each interface decide every verdict.
func TestUnreadableHostEndpointFailsClosed(t *testing.T) {
	l := newByIPLab(t)
	h := l.h
	l.feed(t, hostOpenModel)
	const eth0, eth1, eth2 = "192.0.2.1", "198.18.1.1", "203.0.113.1"
	var src netip.Addr // the peer's own address
	records := func(what string, want ...string) {
		t.Helper()
		nstest.Eventually(t, 10*time.Second, func() string {
			var got []string
			for _, r := range h.f.UnreadableRecords() {
				got = append(got, r.Name+": "+r.Scope)
			}
			if slices.Equal(got, want) {
				return ""
			}
			return fmt.Sprintf("%s: unreadable records %q, want %q", what, got, want)
		})
	}
	denied := func(iface, addr string) []probe {
		return []probe{{iface, src, addr, "8080", false}, {iface, src, addr, "22", true}}
	}
	l.eventually(t, "all open", cat(open("eth0", src, eth0), open("eth1", src, eth1), open("eth2", src, eth2))...)

	// "edge" stops decoding (a number where its ports go): eth1, the
	// interface it names, is denied; eth0 and eth2 stay open.
	bad := errors.New("for the test: spec.ports: not a list")
	h.f.SetUnreadable(feed.Update{Kind: api.KindHostEndpoint, Name: "edge", Unreadable: bad,
		Value: []byte(`{"kind":"HostEndpoint","metadata":{"name":"edge"},"spec":{"node":"node-a","interfaceName":"eth1","ports":7}}`)})
	l.eventually(t, "edge unreadable", denied("eth1", eth1)...)
	records("edge unreadable", "edge: this node's host traffic on eth1")
	l.now(t, "edge unreadable", cat(denied("eth1", eth1), open("eth0", src, eth0), open("eth2", src, eth2))...)

	// Fixed: open again.
	l.feed(t, hostOpenModel)
	l.eventually(t, "edge fixed", open("eth1", src, eth1)...)
	records("edge fixed")

	// Another node's record that does not decode: listed, nothing
	// changes here.
	h.f.SetUnreadable(feed.Update{Kind: api.KindHostEndpoint, Name: "far", Unreadable: bad,
		Value: []byte(`{"metadata":{"name":"far"},"spec":{"node":"node-b","interfaceName":"eth2","ports":7}}`)})
	records("another node's", `far: nothing on this node (the record names node "node-b")`)
	l.now(t, "another node's", cat(open("eth0", src, eth0), open("eth1", src, eth1), open("eth2", src, eth2))...)

	// Nothing can be read of it ({}, or content naming another record):
	// every interface of this node is denied, the failsafe ports
	// answered; eth1's own endpoint still governs eth1.
	for _, v := range []string{`{}`, `{"metadata":{"name":"edge"},"spec":{"node":"node-b","interfaceName":"eth2"}}`} {
		h.f.SetUnreadable(feed.Update{Kind: api.KindHostEndpoint, Name: "blank", Unreadable: bad, Value: []byte(v)})
		l.eventually(t, "blank "+v, cat(denied("eth0", eth0), denied("eth2", eth2))...)
		records("blank "+v, `blank: this node's host traffic on every interface ("*")`, `far: nothing on this node (the record names node "node-b")`)
		h.f.DeleteResource(api.KindHostEndpoint, "blank")
		l.eventually(t, "blank deleted", cat(open("eth0", src, eth0), open("eth2", src, eth2))...)
	}

	// A snapshot reports it: denied; the next, without it: open.
	d, err := api.Decode([]byte(hostOpenModel))
	if err != nil {
		t.Fatal(err)
	}
	snap := map[api.Kind][]api.Resource{api.KindIPPool: nil, api.KindNode: nil, api.KindWorkloadEndpoint: nil,
		api.KindHostEndpoint: nil, api.KindGlobalNetworkPolicy: nil}
	for _, r := range d.Resources {
		snap[r.GetKind()] = append(snap[r.GetKind()], r)
	}
	h.f.ReplaceResources(snap)
	h.f.ReplaceUnreadable([]feed.Update{{Kind: api.KindHostEndpoint, Name: "blank", Unreadable: bad, Value: []byte(`null`)}})
	l.eventually(t, "snapshot with it", cat(denied("eth0", eth0), denied("eth2", eth2))...)
	records("snapshot with it", `blank: this node's host traffic on every interface ("*")`)
	h.f.ReplaceResources(snap)
	h.f.ReplaceUnreadable(nil)
	l.eventually(t, "snapshot without it", cat(open("eth0", src, eth0), open("eth2", src, eth2))...)
	records("snapshot without it")

	// Refused (a port without a name): its interface is denied.
	refused := &api.HostEndpoint{TypeMeta: api.TypeMeta{Kind: api.KindHostEndpoint},
		Metadata: api.ObjectMeta{Name: "edge", Labels: map[string]string{"role": "open"}}}
	refused.Spec.Node, refused.Spec.InterfaceName = "node-a", "eth1"
	refused.Spec.Ports = []api.EndpointPort{{Port: 80}}
	h.f.SetResource(refused)
	l.eventually(t, "edge refused", denied("eth1", eth1)...)
	records("edge refused", "edge: this node's host traffic on eth1")
	l.now(t, "edge refused", cat(denied("eth1", eth1), open("eth0", src, eth0), open("eth2", src, eth2))...)
	l.feed(t, hostOpenModel)
	l.eventually(t, "edge fixed again", open("eth1", src, eth1)...)
	records("edge fixed again")
}
