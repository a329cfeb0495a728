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

// hostOpenModel: eth1 is node-a's host endpoint "edge" (and
// "zz-eth1"'s, which no policy opens, once edge is gone), and every
// other interface "a-auto"'s ("*", sorting first, like an automatic
// host endpoint); a policy opens edge and a-auto to everything. A preDNAT policy
// allows 8080 to host endpoints without a role (none here): it must not
// pick what stands for an unreadable record either.
const hostOpenModel = `
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: edge, labels: {role: open}}
spec: {node: node-a, interfaceName: eth1}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: zz-eth1, labels: {role: closed}}
spec: {node: node-a, interfaceName: eth1}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: a-auto, labels: {role: open}}
spec: {node: node-a, interfaceName: "*"}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: roleless-8080}
spec:
  selector: "!has(role)"
  preDNAT: true
  applyOnForward: true
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
` + openAllGNP

// TestUnreadableHostEndpointFailsClosed: a HostEndpoint record that
// does not decode, or that felix refuses, is not skipped (which left
// its interface open, at the latest after a restart): felix denies the
// interface salvaged from the record (the interfaces holding its
// expected addresses; every host endpoint of the node when neither can
// be read), with the failsafe ports still answered, and no other policy
// (a preDNAT Allow picking endpoints without labels) lets traffic
// through it; a record of another node changes nothing here; the deny
// ends when the record is set again, or when a snapshot no longer has
// it. Real connections from peers behind each interface decide every
// verdict.
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
	allOpen := cat(open("eth0", src, eth0), open("eth1", src, eth1), open("eth2", src, eth2))
	allDenied := cat(denied("eth0", eth0), denied("eth1", eth1), denied("eth2", eth2))
	unreadable := func(name, value string) {
		h.f.SetUnreadable(feed.Update{Kind: api.KindHostEndpoint, Name: name, Unreadable: errors.New("for the test"), Value: []byte(value)})
	}
	l.eventually(t, "all open", allOpen...)

	// "edge" stops decoding (a number where its ports go): eth1, the
	// interface it names, is denied; the rest stays open. A second
	// "node" key in another case is the one the decoder takes.
	for _, v := range []string{
		`{"kind":"HostEndpoint","metadata":{"name":"edge"},"spec":{"node":"node-a","interfaceName":"eth1","ports":7}}`,
		`{"metadata":{"name":"edge"},"spec":{"node":"node-b","Node":"node-a","interfaceName":"eth1","ports":7}}`,
		// Found by address: the interface holding it.
		`{"metadata":{"name":"edge"},"spec":{"node":"node-a","expectedIPs":["198.18.1.1"],"ports":7}}`,
		// Now another node's: its previous version, this node's, goes
		// (zz-eth1 governs eth1).
		`{"metadata":{"name":"edge"},"spec":{"node":"node-b","interfaceName":"eth1","ports":7}}`,
	} {
		unreadable("edge", v)
		l.eventually(t, "edge unreadable "+v, denied("eth1", eth1)...)
		l.now(t, "edge unreadable "+v, cat(denied("eth1", eth1), open("eth0", src, eth0), open("eth2", src, eth2))...)
		l.feed(t, hostOpenModel)
		l.eventually(t, "edge fixed", allOpen...)
		records("edge fixed")
	}
	unreadable("edge", `{"metadata":{"name":"edge"},"spec":{"node":"node-a","interfaceName":"eth1","ports":7}}`)
	records("edge unreadable", "edge: this node's host traffic on eth1")
	l.feed(t, hostOpenModel)
	records("edge fixed")

	// Another node's record that does not decode: listed, nothing
	// changes here.
	unreadable("far", `{"metadata":{"name":"far"},"spec":{"node":"node-b","interfaceName":"eth2","ports":7}}`)
	records("another node's", `far: nothing on this node (the record names node "node-b")`)
	l.now(t, "another node's", allOpen...)

	// Nothing can be read of where it applies ({}, or content naming
	// another record): every host endpoint of this node is denied,
	// a-auto ("*", sorting first) and edge included; the failsafe ports
	// answer.
	everywhere := `blank: this node's host traffic on every interface ("*"; every host endpoint of this node)`
	for _, v := range []string{`{}`, `{"metadata":{"name":"edge"},"spec":{"node":"node-b","interfaceName":"eth2"}}`,
		// An interface named but unreadable: not where its addresses are.
		`{"metadata":{"name":"blank"},"spec":{"node":"node-a","interfaceName":["eth1"],"expectedIPs":["192.0.2.1"]}}`} {
		unreadable("blank", v)
		l.eventually(t, "blank "+v, allDenied...)
		records("blank "+v, everywhere, `far: nothing on this node (the record names node "node-b")`)
		h.f.DeleteResource(api.KindHostEndpoint, "blank")
		l.eventually(t, "blank deleted", allOpen...)
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
	h.f.ReplaceUnreadable([]feed.Update{{Kind: api.KindHostEndpoint, Name: "blank", Unreadable: errors.New("for the test"), Value: []byte(`null`)}})
	l.eventually(t, "snapshot with it", allDenied...)
	records("snapshot with it", everywhere)
	h.f.ReplaceResources(snap)
	h.f.ReplaceUnreadable(nil)
	l.eventually(t, "snapshot without it", allOpen...)
	records("snapshot without it")

	// Refused (a port without a name): its interface is denied. Edited
	// to another node, still refused: what stood for it goes.
	refused := &api.HostEndpoint{TypeMeta: api.TypeMeta{Kind: api.KindHostEndpoint},
		Metadata: api.ObjectMeta{Name: "edge", Labels: map[string]string{"role": "open"}}}
	refused.Spec.Node, refused.Spec.InterfaceName = "node-a", "eth1"
	refused.Spec.Ports = []api.EndpointPort{{Port: 80}}
	h.f.SetResource(refused)
	l.eventually(t, "edge refused", denied("eth1", eth1)...)
	records("edge refused", "edge: this node's host traffic on eth1")
	l.now(t, "edge refused", cat(denied("eth1", eth1), open("eth0", src, eth0), open("eth2", src, eth2))...)
	byAddr := *refused
	byAddr.Spec.InterfaceName, byAddr.Spec.ExpectedIPs = "", []string{eth1}
	h.f.SetResource(&byAddr)
	records("edge refused, by address", "edge: this node's host traffic on the interfaces holding [198.18.1.1]")
	l.eventually(t, "edge refused, by address", denied("eth1", eth1)...)
	l.now(t, "edge refused, by address", cat(denied("eth1", eth1), open("eth0", src, eth0), open("eth2", src, eth2))...)
	elsewhere := *refused
	elsewhere.Spec.Node = "node-b"
	h.f.SetResource(&elsewhere)
	records("edge refused for node-b", `edge: nothing on this node (the record names node "node-b")`)
	l.eventually(t, "edge refused for node-b", cat(denied("eth1", eth1), open("eth0", src, eth0), open("eth2", src, eth2))...)
	l.feed(t, hostOpenModel)
	records("edge fixed again")
	l.eventually(t, "edge fixed again", allOpen...)
}
