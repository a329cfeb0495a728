// Package policy computes and programs Calico's network policy for the
// workloads of one node: which tiers, policies and profiles apply to each
// local endpoint in each direction, a chain per policy shared by every
// endpoint it selects, and nftables sets for the selectors and named
// ports those rules use, with the addresses of every matching endpoint
// and network set in the cluster. See README.md for the model and what
// is exempt from it.
package policy

import (
	"iter"
	"maps"
	"net/netip"
	"slices"
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
// cluster's, so this is kept small: no map, no string of its own but
// its key (a local endpoint's interface and pod are in its local), and
// its address in place when it has one address of full length (a pod's
// /32 or /128), as nearly all have.
type endpoint struct {
	key  string
	g    *group
	node unique.Handle[string]
	// addr is the address when kind is addr4 or addr6; otherwise more
	// holds every prefix (none for addrNone).
	addr [16]byte
	idx  uint32 // position in g.eps
	kind addrKind
	more *[]netip.Prefix
}

// addrKind says where an endpoint keeps its prefixes.
type addrKind uint8

const (
	addrNone addrKind = iota // no address
	addr4                    // one IPv4 /32, in addr
	addr6                    // one IPv6 /128, in addr
	addrMore                 // in more (several, or a wider prefix)
)

// setIPs records ips (masked prefixes) as e's.
func (e *endpoint) setIPs(ips []netip.Prefix) {
	e.addr, e.kind, e.more = [16]byte{}, addrNone, nil
	switch {
	case len(ips) == 0:
	case len(ips) == 1 && ips[0].Addr().Is4() && ips[0].Bits() == 32:
		e.kind, e.addr = addr4, ips[0].Addr().As16()
	case len(ips) == 1 && ips[0].Addr().Is6() && ips[0].Addr().Zone() == "" && ips[0].Bits() == 128:
		e.kind, e.addr = addr6, ips[0].Addr().As16()
	default:
		more := slices.Clone(ips)
		e.kind, e.more = addrMore, &more
	}
}

// prefixes yields e's prefixes in the order given.
func (e *endpoint) prefixes() iter.Seq[netip.Prefix] {
	return func(yield func(netip.Prefix) bool) {
		switch e.kind {
		case addr4:
			yield(netip.PrefixFrom(netip.AddrFrom16(e.addr).Unmap(), 32))
		case addr6:
			yield(netip.PrefixFrom(netip.AddrFrom16(e.addr), 128))
		case addrMore:
			for _, p := range *e.more {
				if !yield(p) {
					return
				}
			}
		}
	}
}

// ipList is e's prefixes as a new slice.
func (e *endpoint) ipList() []netip.Prefix { return slices.Collect(e.prefixes()) }

// sameIPs reports whether e's prefixes are ips, in order.
func (e *endpoint) sameIPs(ips []netip.Prefix) bool {
	i := 0
	for p := range e.prefixes() {
		if i >= len(ips) || ips[i] != p {
			return false
		}
		i++
	}
	return i == len(ips)
}

// nodeName is the name of e's node ("" when not given).
func (e *endpoint) nodeName() string {
	if e.node == (unique.Handle[string]{}) {
		return ""
	}
	return e.node.Value()
}

// groupScope is what groups of the same namespace, service account,
// profiles and kind (host or workload) share: those, the labels their
// profiles give (the groups' own labels come on top), and the
// namespace's and service account's labels of the groups whose own
// labels have none of Calico's "pcns."/"pcsa." labels (nearly all).
// A namespace's pods are a few scopes whatever their number.
type groupScope struct {
	hash     uint64
	ns, sa   string
	host     bool
	profiles []string
	// labels are the profiles' labels, later profiles winning, packed
	// (one scope per namespace and service account: a map each was
	// 336 bytes in two objects among the start-up's garbage). Nobody
	// may change them: derive replaces them.
	labels             profileLabels
	nsLabels, saLabels *labelSet
	groups             []*group // group.scIdx is the position here
}

// group is what endpoints with the same labels, profiles, namespace,
// service account and named ports share (the replicas of a Deployment
// are one group), with what the calculator derives from that: the
// labels selectors see (labelView), and what they decide
// (calc_index.go). ns, sa, host and profiles are its scope's (shared;
// nobody may change them).
type group struct {
	hash     uint64
	sc       *groupScope
	ns, sa   string
	own      ownLabels // the endpoints' own labels
	profiles []string
	ports    []NamedPort

	nsLabels *labelSet // its namespace's labels
	saLabels *labelSet // its service account's labels

	eps []*endpoint // endpoint.idx is the position here
	// Active sets selecting the group, as of setGen.
	setGen int
	sets   []*aset
	// Policies applying to the group (asked for local endpoints only).
	pols  *groupPolicies
	scIdx int32 // position in sc.groups
	host  bool  // host endpoints (Endpoint.Host)
}

// groupPolicies are the policies applying to a group in evaluation
// order, as of gen.
type groupPolicies struct {
	gen     int
	in, out []*cpolicy
}

// labelView is the labels selectors see for a group's endpoints: its
// profiles' labels, its own over them, and its namespace and service
// account names (projectcalico.org/namespace, .../serviceaccount) over
// both, read in place rather than merged into a map per group.
type labelView struct{ g *group }

// Get implements selector.Labels.
func (v labelView) Get(k string) (string, bool) {
	g := v.g
	switch {
	case k == api.LabelNamespace && g.ns != "":
		return g.ns, true
	case k == api.LabelServiceAccount && g.sa != "":
		return g.sa, true
	}
	if val, ok := g.own.get(k); ok {
		return val, true
	}
	return g.sc.labels.get(k)
}

// effective merges a group's labels (labelView's) into a new map.
func (g *group) effective() map[string]string {
	labels := make(map[string]string, g.sc.labels.len()+g.own.len()+2)
	maps.Insert(labels, g.sc.labels.all())
	for k, v := range g.own.all() {
		labels[k] = v
	}
	if g.ns != "" {
		labels[api.LabelNamespace] = g.ns
	}
	if g.sa != "" {
		labels[api.LabelServiceAccount] = g.sa
	}
	return labels
}

// deriveScope computes the labels a scope's profiles give, and its
// namespace's and service account's labels (and takes the label sets
// in place of those it had).
func (c *Calc) deriveScope(s *groupScope) {
	labels := map[string]string{}
	for _, name := range s.profiles {
		if p := c.profiles[name]; p != nil {
			maps.Insert(labels, p.labels.all())
		}
	}
	old := []*labelSet{s.nsLabels, s.saLabels}
	s.labels = packProfileLabels(labels)
	s.nsLabels = c.labelSets.get(scopeLabels(labels, nsLabelPrefix, c.profiles[api.NamespaceProfilePrefix+s.ns], s.ns))
	s.saLabels = c.labelSets.get(scopeLabels(labels, saLabelPrefix, c.profiles[api.ServiceAccountProfilePrefix+s.ns+"."+s.sa], s.sa))
	for _, ls := range old {
		c.labelSets.put(ls)
	}
}

// derive takes a group's namespace and service account labels: its
// scope's, unless its own labels carry "pcns."/"pcsa." ones (which, as
// in Calico, count as its namespace's or service account's).
func (c *Calc) derive(g *group) {
	old := []*labelSet{g.nsLabels, g.saLabels}
	if !g.own.hasKeyPrefix(nsLabelPrefix, saLabelPrefix) {
		g.nsLabels, g.saLabels = c.labelSets.ref(g.sc.nsLabels), c.labelSets.ref(g.sc.saLabels)
	} else {
		labels := g.effective()
		g.nsLabels = c.labelSets.get(scopeLabels(labels, nsLabelPrefix, c.profiles[api.NamespaceProfilePrefix+g.ns], g.ns))
		g.saLabels = c.labelSets.get(scopeLabels(labels, saLabelPrefix, c.profiles[api.ServiceAccountProfilePrefix+g.ns+"."+g.sa], g.sa))
	}
	for _, ls := range old {
		c.labelSets.put(ls)
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
		// Its unprefixed labels first, so that where it has both "team"
		// and "pcns.team" the prefixed one wins whatever the map's order.
		for k, v := range p.labels.all() {
			if !strings.HasPrefix(k, nsLabelPrefix) && !strings.HasPrefix(k, saLabelPrefix) {
				out[k] = v
			}
		}
		for k, v := range p.labels.all() {
			if s, ok := strings.CutPrefix(k, prefix); ok {
				out[s] = v
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
	labels          profileLabels
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
