package api

// HostEndpoint is Calico's HostEndpoint: one of a node's interfaces (or,
// with InterfaceName "*", all of the host's own traffic) that policy
// selects by the endpoint's labels, as it selects pods.
type HostEndpoint struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta       `json:"metadata"`
	Spec     HostEndpointSpec `json:"spec"`
}

// HostEndpointSpec is Calico's v3 HostEndpointSpec.
type HostEndpointSpec struct {
	// Node is the node whose interface this is.
	Node string `json:"node,omitempty"`
	// InterfaceName is the interface policed, or "*" for all of the
	// host's interfaces (traffic to and from the host's own processes).
	InterfaceName string `json:"interfaceName,omitempty"`
	// ExpectedIPs are the addresses the interface holds; rules' selectors
	// that pick the endpoint match them.
	ExpectedIPs []string `json:"expectedIPs,omitempty"`
	// Profiles name Profiles whose labels and rules apply, as for pods.
	Profiles []string `json:"profiles,omitempty"`
	// Ports are the endpoint's named ports.
	Ports []EndpointPort `json:"ports,omitempty"`
}

// EndpointPort is one named port of a host endpoint.
type EndpointPort struct {
	Name     string   `json:"name"`
	Protocol Protocol `json:"protocol"`
	Port     uint16   `json:"port"`
}

// GetKind implements Resource.
func (h *HostEndpoint) GetKind() Kind { return KindHostEndpoint }

// Meta implements Resource.
func (h *HostEndpoint) Meta() *ObjectMeta { return &h.Metadata }

func (h *HostEndpoint) setDefaults() {}

// Validate implements Resource.
func (h *HostEndpoint) Validate() error {
	var v errs
	validateMeta(&v, KindHostEndpoint, &h.Metadata)
	return v.result(KindHostEndpoint, h.Metadata.Name)
}
