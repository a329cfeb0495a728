package api

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
)

// The Kubernetes NetworkPolicySpec of a StagedKubernetesNetworkPolicy,
// field for field as networking.k8s.io/v1 writes it (JSON names,
// shapes, optional fields). These are routed's own types rather than
// k8s.io/api's because pkg/api is linked into the node binary, and
// k8s.io/api/networking/v1 would bring k8s.io/api/core/v1 and the
// apimachinery runtime with it (29.8 -> 36.8 MB). The controllers
// convert it into the Kubernetes type (routed/controllers,
// ConvertStagedKubernetesNetworkPolicy), and a test there checks that
// every field of the Kubernetes type survives the trip.

// K8sNetworkPolicySpec is a Kubernetes NetworkPolicySpec.
type K8sNetworkPolicySpec struct {
	// PodSelector is written even when empty ({}: every pod of the
	// namespace), as Kubernetes writes it.
	PodSelector K8sLabelSelector              `json:"podSelector"`
	Ingress     []K8sNetworkPolicyIngressRule `json:"ingress,omitempty"`
	Egress      []K8sNetworkPolicyEgressRule  `json:"egress,omitempty"`
	PolicyTypes []string                      `json:"policyTypes,omitempty"`
}

// K8sLabelSelector is a Kubernetes LabelSelector.
type K8sLabelSelector struct {
	MatchLabels      map[string]string             `json:"matchLabels,omitempty"`
	MatchExpressions []K8sLabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// K8sLabelSelectorRequirement is one of a LabelSelector's expressions.
type K8sLabelSelectorRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values,omitempty"`
}

// K8sNetworkPolicyIngressRule is a Kubernetes NetworkPolicyIngressRule.
type K8sNetworkPolicyIngressRule struct {
	Ports []K8sNetworkPolicyPort `json:"ports,omitempty"`
	From  []K8sNetworkPolicyPeer `json:"from,omitempty"`
}

// K8sNetworkPolicyEgressRule is a Kubernetes NetworkPolicyEgressRule.
type K8sNetworkPolicyEgressRule struct {
	Ports []K8sNetworkPolicyPort `json:"ports,omitempty"`
	To    []K8sNetworkPolicyPeer `json:"to,omitempty"`
}

// K8sNetworkPolicyPort is a Kubernetes NetworkPolicyPort.
type K8sNetworkPolicyPort struct {
	Protocol *string  `json:"protocol,omitempty"`
	Port     *K8sPort `json:"port,omitempty"`
	EndPort  *int32   `json:"endPort,omitempty"`
}

// K8sNetworkPolicyPeer is a Kubernetes NetworkPolicyPeer.
type K8sNetworkPolicyPeer struct {
	PodSelector       *K8sLabelSelector `json:"podSelector,omitempty"`
	NamespaceSelector *K8sLabelSelector `json:"namespaceSelector,omitempty"`
	IPBlock           *K8sIPBlock       `json:"ipBlock,omitempty"`
}

// K8sIPBlock is a Kubernetes IPBlock.
type K8sIPBlock struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// K8sPort is Kubernetes' IntOrString as a NetworkPolicyPort's port: a
// number, or a name (a JSON string, even one of digits, as Kubernetes
// keeps it).
type K8sPort struct {
	Num    int32
	Name   string
	IsName bool
}

// MarshalJSON writes the number or the name.
func (p K8sPort) MarshalJSON() ([]byte, error) {
	if p.IsName {
		return json.Marshal(p.Name)
	}
	return json.Marshal(p.Num)
}

// UnmarshalJSON reads a number or a string.
func (p *K8sPort) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*p = K8sPort{Name: s, IsName: true}
		return nil
	}
	var n int32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("a port must be a number or a name, not %s", b)
	}
	*p = K8sPort{Num: n}
	return nil
}

func (p K8sPort) String() string {
	if p.IsName {
		return strconv.Quote(p.Name)
	}
	return strconv.Itoa(int(p.Num))
}

// setDefaults fills policyTypes as the API server does.
func (s *K8sNetworkPolicySpec) setDefaults() {
	if len(s.PolicyTypes) > 0 {
		return
	}
	s.PolicyTypes = []string{"Ingress"}
	if len(s.Egress) > 0 {
		s.PolicyTypes = append(s.PolicyTypes, "Egress")
	}
}

// validate checks the spec as Kubernetes validates a NetworkPolicy's.
func (s *K8sNetworkPolicySpec) validate(v *errs) {
	validateK8sSelector(v, "spec.podSelector", &s.PodSelector)
	for i, r := range s.Ingress {
		f := indexed("spec.ingress", i)
		validateK8sPorts(v, f+".ports", r.Ports)
		validateK8sPeers(v, f+".from", r.From)
	}
	for i, r := range s.Egress {
		f := indexed("spec.egress", i)
		validateK8sPorts(v, f+".ports", r.Ports)
		validateK8sPeers(v, f+".to", r.To)
	}
	if len(s.PolicyTypes) > 2 {
		v.add("spec.policyTypes", s.PolicyTypes, "may not give more than two policy types")
	}
	for i, t := range s.PolicyTypes {
		if t != "Ingress" && t != "Egress" {
			v.add(indexed("spec.policyTypes", i), t, "must be Ingress or Egress")
		}
	}
}

func validateK8sSelector(v *errs, field string, s *K8sLabelSelector) {
	validateLabels(v, field+".matchLabels", s.MatchLabels)
	for i, e := range s.MatchExpressions {
		f := indexed(field+".matchExpressions", i)
		validateLabels(v, f+".key", map[string]string{e.Key: ""})
		switch e.Operator {
		case "In", "NotIn":
			if len(e.Values) == 0 {
				v.add(f+".values", nil, "must be given for operator %s", e.Operator)
			}
		case "Exists", "DoesNotExist":
			if len(e.Values) > 0 {
				v.add(f+".values", e.Values, "must be empty for operator %s", e.Operator)
			}
		default:
			v.add(f+".operator", e.Operator, "must be In, NotIn, Exists or DoesNotExist")
		}
		for j, val := range e.Values {
			if !labelValueRE().MatchString(val) || len(val) > 63 {
				v.add(indexed(f+".values", j), val, "is not a valid label value")
			}
		}
	}
}

func validateK8sPorts(v *errs, field string, ports []K8sNetworkPolicyPort) {
	for i, p := range ports {
		f := indexed(field, i)
		if p.Protocol != nil && *p.Protocol != "TCP" && *p.Protocol != "UDP" && *p.Protocol != "SCTP" {
			v.add(f+".protocol", *p.Protocol, "must be TCP, UDP or SCTP")
		}
		switch {
		case p.Port == nil:
		case p.Port.IsName && !validPortName(p.Port.Name):
			v.add(f+".port", p.Port.Name, "must be a port number 1-65535 or a port name (at most 15 lower-case letters, digits and '-', with a letter, no '--', not starting or ending with '-')")
		case !p.Port.IsName && (p.Port.Num < 1 || p.Port.Num > 65535):
			v.add(f+".port", p.Port.Num, "must be a port number 1-65535")
		}
		if p.EndPort == nil {
			continue
		}
		switch {
		case p.Port == nil || p.Port.IsName:
			v.add(f+".endPort", *p.EndPort, "needs a numeric port to start the range")
		case *p.EndPort < p.Port.Num || *p.EndPort > 65535:
			v.add(f+".endPort", *p.EndPort, "must be at least port (%d) and at most 65535", p.Port.Num)
		}
	}
}

func validateK8sPeers(v *errs, field string, peers []K8sNetworkPolicyPeer) {
	for i, p := range peers {
		f := indexed(field, i)
		n := 0
		if p.PodSelector != nil {
			n++
			validateK8sSelector(v, f+".podSelector", p.PodSelector)
		}
		if p.NamespaceSelector != nil {
			n++
			validateK8sSelector(v, f+".namespaceSelector", p.NamespaceSelector)
		}
		if b := p.IPBlock; b != nil {
			n++
			validateK8sIPBlock(v, f+".ipBlock", b)
		}
		switch {
		case n == 0:
			v.add(f, nil, "must give a peer: podSelector, namespaceSelector or ipBlock")
		case n > 1 && p.IPBlock != nil:
			v.add(f, nil, "may not give ipBlock with another peer")
		}
	}
}

func validateK8sIPBlock(v *errs, field string, b *K8sIPBlock) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		v.add(field+".cidr", b.CIDR, "is not a CIDR")
		return
	}
	for i, x := range b.Except {
		ex, err := netip.ParsePrefix(x)
		switch {
		case err != nil:
			v.add(indexed(field+".except", i), x, "is not a CIDR")
		case ex.Addr().Is4() != cidr.Addr().Is4() || !cidr.Contains(ex.Addr()) || ex.Bits() <= cidr.Bits():
			v.add(indexed(field+".except", i), x, "must be a strict subset of cidr %s", b.CIDR)
		}
	}
}

// validPortName is Kubernetes' IANA_SVC_NAME rule.
func validPortName(s string) bool {
	if len(s) == 0 || len(s) > 15 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	letter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z':
			letter = true
		case c >= '0' && c <= '9':
		case c == '-':
			if s[i-1] == '-' {
				return false
			}
		default:
			return false
		}
	}
	return letter
}
