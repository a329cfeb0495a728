package api

import (
	"net/netip"
	"strings"

	"github.com/routed-net/routed/pkg/kernel"
)

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
	// Empty: the interface is the one holding one of ExpectedIPs.
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

// AllInterfaces is the InterfaceName of a host endpoint that stands for
// every interface of its host (Calico's wildcard host endpoint).
const AllInterfaces = "*"

// DefaultAllowProfile is the profile Calico gives automatically created
// host endpoints: it allows everything in both directions, so that such
// an endpoint changes nothing until a policy selects it.
const DefaultAllowProfile = "projectcalico-default-allow"

// ifaceNameRE is Calico's interface name format (what Linux accepts in
// a name, at most 15 characters).
var ifaceNameRE = lazyRegexp(`^[a-zA-Z0-9_.-]{1,15}$`)

// HostInterfaceValid reports whether n may be a HostEndpoint's
// interfaceName that names an interface ("*" or a host interface's
// name, not a pod's), as Validate requires.
func HostInterfaceValid(n string) bool {
	return n == AllInterfaces || ifaceNameRE().MatchString(n) && !strings.HasPrefix(n, kernel.HostDevicePrefix)
}

// GetKind implements Resource.
func (h *HostEndpoint) GetKind() Kind { return KindHostEndpoint }

// Meta implements Resource.
func (h *HostEndpoint) Meta() *ObjectMeta { return &h.Metadata }

func (h *HostEndpoint) setDefaults() {}

// Validate implements Resource: Calico's rules (a node; an interface
// name, "*", or expected IPs to find the interface by), plus one of
// routed's: a workload interface (the "cali" prefix) is a pod's, whose
// policy is the pod's own.
func (h *HostEndpoint) Validate() error {
	var v errs
	validateMeta(&v, KindHostEndpoint, &h.Metadata)
	s := h.Spec
	if s.Node == "" {
		v.add("spec.node", nil, "is required: a host endpoint is one node's interface")
	} else {
		validateName(&v, s.Node)
	}
	switch n := s.InterfaceName; {
	case n == "" && len(s.ExpectedIPs) == 0:
		v.add("spec.interfaceName", nil, "is required when spec.expectedIPs is empty: give the interface, \"*\" for all of them, or the addresses that find it")
	case n == "" || n == AllInterfaces:
	case !ifaceNameRE().MatchString(n):
		v.add("spec.interfaceName", n, "must be \"*\" or an interface name (letters, digits, '_', '.', '-', at most 15)")
	case strings.HasPrefix(n, kernel.HostDevicePrefix):
		v.add("spec.interfaceName", n, "is a pod's interface (prefix %q): pods are policed as workload endpoints", kernel.HostDevicePrefix)
	}
	for i, ip := range s.ExpectedIPs {
		switch a, err := netip.ParseAddr(ip); {
		case err != nil:
			v.add(indexed("spec.expectedIPs", i), ip, "is not an IP address")
		case a.Zone() != "":
			// An interface's addresses carry no zone: one written
			// with it would find no interface, leaving it unpoliced.
			v.add(indexed("spec.expectedIPs", i), ip, "has a zone (%%%s): give the address alone, and the interface in spec.interfaceName", a.Zone())
		}
	}
	for i, p := range s.Profiles {
		if p == "" || len(p) > 253 || !nameRE().MatchString(p) {
			v.add(indexed("spec.profiles", i), p, "is not a profile name")
		}
	}
	seen := map[string]bool{}
	for i, p := range s.Ports {
		f := indexed("spec.ports", i)
		switch {
		case p.Name == "":
			v.add(f+".name", nil, "is required: rules refer to a host endpoint's ports by name")
		case !portNameRE().MatchString(p.Name):
			v.add(f+".name", p.Name, "is not a port name")
		}
		if !p.Protocol.HasPorts() {
			v.add(f+".protocol", p.Protocol.String(), "must be TCP, UDP or SCTP")
		}
		if p.Port == 0 {
			v.add(f+".port", nil, "is required (1-65535)")
		}
		n, _ := p.Protocol.Num()
		k := p.Name + "/" + string(rune(n))
		if seen[k] {
			v.add(f, p.Name, "names the same port and protocol as an earlier one")
		}
		seen[k] = true
	}
	return v.result(KindHostEndpoint, h.Metadata.Name)
}
