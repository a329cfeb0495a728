package api

// Action is what a policy rule does with the packets it matches.
type Action string

// Rule actions (Calico's): Allow and Deny end evaluation, Pass skips to
// the next tier, Log logs and goes on to the next rule.
const (
	ActionAllow Action = "Allow"
	ActionDeny  Action = "Deny"
	ActionLog   Action = "Log"
	ActionPass  Action = "Pass"
)

// PolicyType is a direction a policy applies to.
type PolicyType string

// Policy directions.
const (
	PolicyTypeIngress PolicyType = "Ingress"
	PolicyTypeEgress  PolicyType = "Egress"
)

// Rule is one entry of a policy's or profile's ingress or egress list,
// Calico's v3 Rule: every match given must hold for the action to apply.
type Rule struct {
	Action Action `json:"action"`
	// IPVersion limits the rule to IPv4 (4) or IPv6 (6).
	IPVersion   *int        `json:"ipVersion,omitempty"`
	Protocol    *Protocol   `json:"protocol,omitempty"`
	ICMP        *ICMPFields `json:"icmp,omitempty"`
	NotProtocol *Protocol   `json:"notProtocol,omitempty"`
	NotICMP     *ICMPFields `json:"notICMP,omitempty"`
	// Source and Destination match the packet's two ends.
	Source      EntityRule `json:"source,omitzero"`
	Destination EntityRule `json:"destination,omitzero"`
	// Metadata carries annotations about the rule; it does not match.
	Metadata *RuleMetadata `json:"metadata,omitempty"`
}

// ICMPFields matches an ICMP type, and a code within it (a code needs
// its type, as in Calico).
type ICMPFields struct {
	Type *int `json:"type,omitempty"`
	Code *int `json:"code,omitempty"`
}

// EntityRule matches one end of a packet: its address (nets), the
// endpoint or network set it belongs to (selectors), the service account
// of the pod, and its port. Empty fields match anything.
type EntityRule struct {
	Nets     []string `json:"nets,omitempty"`
	NotNets  []string `json:"notNets,omitempty"`
	Selector string   `json:"selector,omitempty"`
	// NotSelector matches what Selector would not, including addresses
	// that are no endpoint at all.
	NotSelector string `json:"notSelector,omitempty"`
	// NamespaceSelector picks namespaces by their profile's labels; in a
	// NetworkPolicy, empty means the policy's own namespace.
	NamespaceSelector string               `json:"namespaceSelector,omitempty"`
	ServiceAccounts   *ServiceAccountMatch `json:"serviceAccounts,omitempty"`
	// Services matches the endpoints of a Kubernetes Service: in an
	// egress rule's destination their addresses and ports, in an
	// ingress rule's source their addresses. It stands alone in its
	// entity (no nets, selectors or service accounts beside it), as in
	// Calico.
	Services *ServiceMatch `json:"services,omitempty"`
	Ports    []Port        `json:"ports,omitempty"`
	NotPorts []Port        `json:"notPorts,omitempty"`
}

// ServiceMatch names a Kubernetes Service. Namespace defaults to a
// NetworkPolicy's own; a GlobalNetworkPolicy or Profile must give it.
type ServiceMatch struct {
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
}

// ServiceAccountMatch matches pods running as a service account named
// in Names (any, when empty) whose labels match Selector.
type ServiceAccountMatch struct {
	Names    []string `json:"names,omitempty"`
	Selector string   `json:"selector,omitempty"`
}

// RuleMetadata holds annotations about one rule.
type RuleMetadata struct {
	Annotations map[string]string `json:"annotations,omitempty"`
}
