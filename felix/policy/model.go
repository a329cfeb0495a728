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

// endpoint is an Endpoint with what the calculator derives from it.
type endpoint struct {
	Endpoint
	labels   map[string]string // profile labels, then its own, then identity
	nsLabels map[string]string // its namespace's labels
	saLabels map[string]string // its service account's labels
	key      string            // labelKey: what selectors see of it
}

// derive computes an endpoint's effective labels from its profiles.
func derive(ep Endpoint, profiles map[string]*profile) *endpoint {
	e := &endpoint{Endpoint: ep, labels: map[string]string{}}
	for _, name := range ep.Profiles {
		if p := profiles[name]; p != nil {
			for k, v := range p.labels {
				e.labels[k] = v
			}
		}
	}
	for k, v := range ep.Labels {
		e.labels[k] = v
	}
	if ep.Namespace != "" {
		e.labels[api.LabelNamespace] = ep.Namespace
	}
	if ep.ServiceAccount != "" {
		e.labels[api.LabelServiceAccount] = ep.ServiceAccount
	}
	e.nsLabels = scopeLabels(e.labels, nsLabelPrefix, profiles[api.NamespaceProfilePrefix+ep.Namespace], ep.Namespace)
	e.saLabels = scopeLabels(e.labels, saLabelPrefix, profiles[api.ServiceAccountProfilePrefix+ep.Namespace+"."+ep.ServiceAccount], ep.ServiceAccount)
	e.key = labelKey(e)
	return e
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
	if o := w.Spec.Orchestrator; o != "" {
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
