package api

import "net/netip"

// DefaultTierName is the tier a policy belongs to when it names none.
const DefaultTierName = "default"

// NetworkPolicy is Calico's namespaced policy: it applies to the
// workload endpoints of its namespace that Selector picks, in Tier at
// Order, and its rules' selectors see its own namespace unless they say
// otherwise. It is stored under StoreName: "<namespace>.<name>".
type NetworkPolicy struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     NetworkPolicySpec `json:"spec"`
}

// PolicySpec holds what NetworkPolicy and GlobalNetworkPolicy share:
// Calico's v3 policy spec less the fields routed cannot honour (those
// are refused when read from Calico's files).
type PolicySpec struct {
	// Tier defaults to "default"; the tier must exist.
	Tier string `json:"tier,omitempty"`
	// Order within the tier, lower first; nil is after every number.
	// Equal orders go by name.
	Order   *float64 `json:"order,omitempty"`
	Ingress []Rule   `json:"ingress,omitempty"`
	Egress  []Rule   `json:"egress,omitempty"`
	// Selector picks the endpoints the policy applies to; empty is all().
	Selector string `json:"selector,omitempty"`
	// Types defaults from the rules present, as in Calico: Egress alone
	// if there are only egress rules, both if both, else Ingress.
	Types []PolicyType `json:"types,omitempty"`
	// ServiceAccountSelector further limits the endpoints to pods whose
	// service account's labels match.
	ServiceAccountSelector string `json:"serviceAccountSelector,omitempty"`
	// PerformanceHints never change enforcement; kept for round trips.
	PerformanceHints []string `json:"performanceHints,omitempty"`
}

// NetworkPolicySpec is Calico's v3 NetworkPolicySpec.
type NetworkPolicySpec struct {
	PolicySpec `json:",inline"`
}

// GlobalNetworkPolicy is Calico's cluster-wide policy: like
// NetworkPolicy, for endpoints of every namespace NamespaceSelector
// picks.
type GlobalNetworkPolicy struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta              `json:"metadata"`
	Spec     GlobalNetworkPolicySpec `json:"spec"`
}

// GlobalNetworkPolicySpec is Calico's v3 GlobalNetworkPolicySpec.
type GlobalNetworkPolicySpec struct {
	PolicySpec `json:",inline"`
	// NamespaceSelector picks the namespaces (by their profile's labels)
	// whose endpoints the policy may apply to; empty is all.
	NamespaceSelector string `json:"namespaceSelector,omitempty"`
	// DoNotTrack: the policy applies to host endpoints before connection
	// tracking, in both directions, and what it allows is not tracked
	// (replies need rules of their own). Needs ApplyOnForward; never
	// applies to pods.
	DoNotTrack bool `json:"doNotTrack,omitempty"`
	// PreDNAT: the policy applies to traffic arriving on host endpoints
	// before DNAT (it sees a NodePort's own port), ingress only. Needs
	// ApplyOnForward; never applies to pods.
	PreDNAT bool `json:"preDNAT,omitempty"`
	// ApplyOnForward: the policy also applies to traffic forwarded
	// through the host endpoints it selects (without it, only to traffic
	// to and from the host's own processes).
	ApplyOnForward bool `json:"applyOnForward,omitempty"`
}

// HostOnly reports whether the policy applies to host endpoints only
// (doNotTrack or preDNAT, as in Calico).
func (s *GlobalNetworkPolicySpec) HostOnly() bool { return s.DoNotTrack || s.PreDNAT }

// Policy is either kind of policy, for code that treats them alike.
type Policy interface {
	Resource
	// Policy returns the spec both kinds share.
	Policy() *PolicySpec
}

// Policy implements Policy.
func (p *NetworkPolicy) Policy() *PolicySpec { return &p.Spec.PolicySpec }

// Policy implements Policy.
func (p *GlobalNetworkPolicy) Policy() *PolicySpec { return &p.Spec.PolicySpec }

// GetKind implements Resource.
func (p *NetworkPolicy) GetKind() Kind { return KindNetworkPolicy }

// Meta implements Resource.
func (p *NetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

func (p *NetworkPolicy) setDefaults() {
	defaultNamespace(&p.Metadata)
	p.Spec.setDefaults()
}

// defaultNamespace puts a namespaced object that names no namespace in
// "default", as calicoctl and kubectl do.
func defaultNamespace(m *ObjectMeta) {
	if m.Namespace == "" {
		m.Namespace = "default"
	}
}

// GetKind implements Resource.
func (p *GlobalNetworkPolicy) GetKind() Kind { return KindGlobalNetworkPolicy }

// Meta implements Resource.
func (p *GlobalNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

func (p *GlobalNetworkPolicy) setDefaults() { p.Spec.setDefaults() }

// setDefaults applies Calico's defaults: tier "default", and types
// from the rule lists present when none are given.
func (s *PolicySpec) setDefaults() {
	normalizeRules(s.Ingress)
	normalizeRules(s.Egress)
	if s.Tier == "" {
		s.Tier = DefaultTierName
	}
	if len(s.Types) > 0 {
		return
	}
	switch {
	case len(s.Ingress) > 0 && len(s.Egress) > 0:
		s.Types = []PolicyType{PolicyTypeIngress, PolicyTypeEgress}
	case len(s.Egress) > 0:
		s.Types = []PolicyType{PolicyTypeEgress}
	default:
		s.Types = []PolicyType{PolicyTypeIngress}
	}
}

// normalizeRules writes the bare addresses of rules' nets as CIDRs.
func normalizeRules(rules []Rule) {
	for i := range rules {
		for _, e := range []*EntityRule{&rules[i].Source, &rules[i].Destination} {
			normalizeNets(e.Nets)
			normalizeNets(e.NotNets)
		}
	}
}

// normalizeNets writes a bare address ("10.0.0.1", which Calico accepts)
// as its /32 or /128, so what is stored is always a CIDR.
func normalizeNets(nets []string) {
	for i, n := range nets {
		if a, err := netip.ParseAddr(n); err == nil {
			nets[i] = netip.PrefixFrom(a, a.BitLen()).String()
		}
	}
}
