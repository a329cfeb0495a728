// Package policy computes and programs Calico's network policy for the
// workloads of one node: which tiers, policies and profiles apply to each
// local endpoint in each direction, a chain per policy shared by every
// endpoint it selects, and nftables sets for the selectors and named
// ports those rules use, with the addresses of every matching endpoint
// and network set in the cluster. See README.md for the model and what
// is exempt from it.
package policy

import (
	"maps"
	"net/netip"
	"strings"
	"unique"

	"github.com/routed-net/routed/pkg/api"
)

// Calico's label for a namespace's or service account's own name, and
// the prefixes its Kubernetes profiles use to carry namespace and service
// account labels onto endpoints.
const (
	LabelName     = "projectcalico.org/name"
	nsLabelPrefix = "pcns."
	saLabelPrefix = "pcsa."
)

// Endpoint is one workload interface as the policy calculator needs it.
type Endpoint struct {
	// Key identifies the endpoint (its WorkloadEndpoint name).
	Key string
	// Iface is the host-side device (cali...); only local endpoints use it.
	Iface string
	// Local endpoints are on this node and get chains and dispatch entries;
	// every endpoint's addresses go into the sets its labels select.
	Local bool
	// Node and Pod are the endpoint's node and pod (for explain and
	// logs; they do not change what is programmed).
	Node, Pod      string
	Namespace      string
	ServiceAccount string
	Labels         map[string]string
	// Profiles in order: their labels are inherited (the endpoint's own
	// labels win) and their rules apply when no policy selects it.
	Profiles []string
	IPs      []netip.Prefix
	Ports    []NamedPort
	// Host marks a host endpoint (calc_hostep.go): doNotTrack and
	// preDNAT policies select only those.
	Host bool
}

// NamedPort is a port a workload declares by name.
type NamedPort struct {
	Name  string
	Proto uint8
	Port  uint16
}

// NetworkSet is a labelled list of nets; Namespace is empty for a
// GlobalNetworkSet.
type NetworkSet struct {
	Key       string
	Namespace string
	Labels    map[string]string
	Nets      []netip.Prefix
}

// endpoint is what the calculator keeps of one endpoint: what differs
// between replicas (its key, addresses and node) and its group, which
// holds what they share. Remote endpoints are nearly all of a big
// cluster's, so this is kept small: no map, and no string of its own
// but its key (a local endpoint's interface and pod are in its local).
type endpoint struct {
	key  string
	g    *group
	ips  []netip.Prefix
	node unique.Handle[string]
	idx  int // position in g.eps
}

// nodeName is the name of e's node ("" when not given).
func (e *endpoint) nodeName() string {
	if e.node == (unique.Handle[string]{}) {
		return ""
	}
	return e.node.Value()
}

// group is what endpoints with the same labels, profiles, namespace,
// service account and named ports share (the replicas of a Deployment
// are one group), with what the calculator derives from that: the
// labels selectors see, and what they decide (calc_index.go).
type group struct {
	hash     uint64
	ns, sa   string
	host     bool      // host endpoints (Endpoint.Host)
	own      ownLabels // the endpoints' own labels
	profiles []string
	ports    []NamedPort

	labels   *labelSet // profile labels, then its own, then identity
	nsLabels *labelSet // its namespace's labels
	saLabels *labelSet // its service account's labels

	eps []*endpoint // endpoint.idx is the position here
	// Active sets selecting the group, as of setGen.
	setGen int
	sets   []*aset
	// Policies applying to the group (asked for local endpoints only).
	pols *groupPolicies
}

// groupPolicies are the policies applying to a group in evaluation
// order, as of gen.
type groupPolicies struct {
	gen     int
	in, out []*cpolicy
}

// derive computes a group's effective labels from its profiles (and
// takes the label sets in place of those it had).
func (c *Calc) derive(g *group) {
	n := g.own.len() + 2
	for _, name := range g.profiles {
		if p := c.profiles[name]; p != nil {
			n += len(p.labels)
		}
	}
	labels := make(map[string]string, n)
	for _, name := range g.profiles {
		if p := c.profiles[name]; p != nil {
			for k, v := range p.labels {
				labels[k] = v
			}
		}
	}
	for k, v := range g.own.all() {
		labels[k] = v
	}
	if g.ns != "" {
		labels[api.LabelNamespace] = g.ns
	}
	if g.sa != "" {
		labels[api.LabelServiceAccount] = g.sa
	}
	old := []*labelSet{g.labels, g.nsLabels, g.saLabels}
	g.nsLabels = c.labelSets.get(scopeLabels(labels, nsLabelPrefix, c.profiles[api.NamespaceProfilePrefix+g.ns], g.ns))
	g.saLabels = c.labelSets.get(scopeLabels(labels, saLabelPrefix, c.profiles[api.ServiceAccountProfilePrefix+g.ns+"."+g.sa], g.sa))
	g.labels = c.labelSets.get(labels)
	for _, s := range old {
		c.labelSets.put(s)
	}
}

// scopeLabels gives the labels of an endpoint's namespace (or service
// account): those its profile applies, with Calico's "pcns."/"pcsa."
// prefix taken off, and projectcalico.org/name.
func scopeLabels(labels map[string]string, prefix string, p *profile, name string) map[string]string {
	out := map[string]string{}
	for k, v := range labels {
		if s, ok := strings.CutPrefix(k, prefix); ok {
			out[s] = v
		}
	}
	if p != nil {
		for k, v := range p.labels {
			if s, ok := strings.CutPrefix(k, prefix); ok {
				out[s] = v
			} else if !strings.HasPrefix(k, nsLabelPrefix) && !strings.HasPrefix(k, saLabelPrefix) {
				out[k] = v
			}
		}
	}
	if name != "" {
		out[LabelName] = name
	}
	return out
}

// profile is a compiled Profile.
type profile struct {
	name            string
	labels          map[string]string
	ingress, egress []*rule
}

// EndpointFromAPI reads what the calculator needs from a
// WorkloadEndpoint: local tells whether it is on this node.
func EndpointFromAPI(w *api.WorkloadEndpoint, local bool) (Endpoint, error) {
	ep := Endpoint{
		Key:            w.Metadata.Name,
		Iface:          w.Spec.InterfaceName,
		Local:          local,
		Node:           w.Spec.Node,
		Pod:            w.Spec.Pod,
		Namespace:      w.Spec.Namespace,
		ServiceAccount: w.Spec.ServiceAccountName,
		Labels:         w.Metadata.Labels,
		Profiles:       w.Spec.Profiles,
	}
	// A pod's endpoint has the label already (api.PodIdentity): then
	// there is nothing to add and no copy to make.
	if o := w.Spec.Orchestrator; o != "" && ep.Labels[api.LabelOrchestrator] != o {
		ep.Labels = maps.Clone(ep.Labels)
		if ep.Labels == nil {
			ep.Labels = map[string]string{}
		}
		ep.Labels[api.LabelOrchestrator] = o
	}
	for i, p := range w.Spec.Ports {
		n, ok := p.Protocol.Num()
		if !ok || p.Name == "" || p.Port == 0 {
			return Endpoint{}, fieldErr("spec.ports", i, p.Name, "needs a name, a protocol and a port 1-65535")
		}
		ep.Ports = append(ep.Ports, NamedPort{Name: p.Name, Proto: n, Port: p.Port})
	}
	for i, n := range w.Spec.IPNetworks {
		p, err := netip.ParsePrefix(n)
		if err != nil {
			return Endpoint{}, fieldErr("spec.ipNetworks", i, n, "is not a CIDR")
		}
		ep.IPs = append(ep.IPs, p.Masked())
	}
	return ep, nil
}
