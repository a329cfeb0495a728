package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/routed-net/routed/felix/policy/nftdp"
	"github.com/routed-net/routed/pkg/api"
)

// Host endpoints that do not apply as written. As in Calico's felix
// (endpoint_mgr.go, resolveHostEndpoints), one host endpoint governs an
// interface of a node: of those naming it or found on it by their
// expectedIPs, the one whose name sorts first; likewise one "*"
// endpoint per node. The others stay in the datastore, fill the sets
// their labels are selected into, and take over when the one applying
// goes, but police nothing while it is there. And a doNotTrack policy
// selecting a "*" endpoint is ignored (Calico: "DoNotTrack policy is
// not supported for a HEP with `interfaceName: *`"), since a "*"
// endpoint has no raw chains. Both are legal input that silently does
// less than it says, so they are reported: felix logs them
// (Manager.Apply), routedctl shows them.

// HostEndpointWarning is one host endpoint that is not enforced as
// written.
type HostEndpointWarning struct {
	// Endpoint is the HostEndpoint's name, Node its node, Iface the
	// interface it is for ("*" for all of them).
	Endpoint string `json:"endpoint"`
	Node     string `json:"node"`
	Iface    string `json:"interface"`
	// ShadowedBy is the HostEndpoint that governs Iface instead (its
	// name sorts first): this one polices nothing.
	ShadowedBy string `json:"shadowedBy,omitempty"`
	// IgnoredDoNotTrack are the doNotTrack policies (PolicyKey) that
	// select this "*" endpoint and are not enforced on it.
	IgnoredDoNotTrack []string `json:"ignoredDoNotTrack,omitempty"`
}

// String says what is not enforced and why, naming both endpoints or
// the policies.
func (w HostEndpointWarning) String() string {
	if w.ShadowedBy != "" {
		return fmt.Sprintf("HostEndpoint %s (node %s, interface %s) is not enforced: HostEndpoint %s governs that interface (of two host endpoints for one interface, the one whose name sorts first applies, as in Calico)",
			w.Endpoint, w.Node, w.Iface, w.ShadowedBy)
	}
	return fmt.Sprintf("doNotTrack policies %s select HostEndpoint %s (node %s, interface *) and are ignored there: doNotTrack policy applies to named interfaces only, as in Calico",
		strings.Join(w.IgnoredDoNotTrack, ", "), w.Endpoint, w.Node)
}

// SetHostEndpointOfNode gives a model (NewModel) a HostEndpoint as its
// node's own, so that HostEndpointWarnings judges every node's (one
// found by its expectedIPs alone has no interface here, so it is not
// judged). SetResource leaves HostEndpoints out: a model that names
// flows' ends (flow records) must not take a host's address for an
// endpoint's.
func (c *Calc) SetHostEndpointOfNode(h *api.HostEndpoint) error {
	he, err := HostEndpointFromAPI(h, true)
	if err != nil {
		return err
	}
	c.SetHostEndpoint(he)
	return nil
}

// HostEndpointWarnings lists the host endpoints given as local (this
// node's to felix; every node's in a model, see SetResource) that are
// not enforced as written, in name order, one warning per interface
// where another governs instead. An endpoint found by address whose
// interface is not known yet is not among them.
func (c *Calc) HostEndpointWarnings() []HostEndpointWarning {
	var out []HostEndpointWarning
	for _, he := range c.hostsInOrder() {
		name, node := strings.TrimPrefix(he.key, hostKeyPrefix), he.ep.nodeName()
		for _, iface := range he.ifaces {
			if by := he.shadowedBy[iface]; by != "" {
				out = append(out, HostEndpointWarning{Endpoint: name, Node: node, Iface: iface, ShadowedBy: strings.TrimPrefix(by, hostKeyPrefix)})
			}
		}
		if !he.wildcard() || len(he.shadowedBy) > 0 {
			continue
		}
		w := HostEndpointWarning{Endpoint: name, Node: node, Iface: nftdp.WildcardIface}
		for _, p := range union(he.in, he.out) {
			if p.host.doNotTrack {
				w.IgnoredDoNotTrack = append(w.IgnoredDoNotTrack, p.key)
			}
		}
		if len(w.IgnoredDoNotTrack) > 0 {
			slices.Sort(w.IgnoredDoNotTrack)
			out = append(out, w)
		}
	}
	return out
}

// hostsInOrder returns the local host endpoints in key order (so in
// name order) with shadowedBy set: per node and interface the first
// that is for it governs (whether it names the interface or holds one
// of its expected IPs there: Calico prefers neither), the rest are
// shadowed by it on that interface and may still govern their others.
func (c *Calc) hostsInOrder() []*hostEP {
	first := map[[2]string]string{}
	out := make([]*hostEP, 0, len(c.hosts.eps))
	for _, k := range sortedKeys(c.hosts.eps) {
		he := c.hosts.eps[k]
		he.shadowedBy = nil
		for _, iface := range he.ifaces {
			at := [2]string{he.ep.nodeName(), iface}
			if by := first[at]; by != "" {
				if he.shadowedBy == nil {
					he.shadowedBy = map[string]string{}
				}
				he.shadowedBy[iface] = by
				continue
			}
			first[at] = k
		}
		out = append(out, he)
	}
	return out
}

// indexHosts points the rule index's named interfaces at the host
// endpoints that govern them (the log reader names the endpoint of a
// packet's interface), whichever of two for one interface was given
// last or went first.
func (c *Calc) indexHosts(order []*hostEP) {
	want := map[string]string{}
	for _, he := range order {
		if he.wildcard() {
			continue
		}
		for _, iface := range he.ifaces {
			if he.shadowedBy[iface] == "" {
				want[iface] = he.key
			}
		}
	}
	for iface := range c.hosts.indexed {
		if _, ok := want[iface]; !ok {
			c.index.deleteIface(iface)
		}
	}
	for iface, k := range want {
		if c.hosts.indexed[iface] != k {
			c.index.setIface(iface, EndpointRef{Key: k})
		}
	}
	c.hosts.indexed = want
}
