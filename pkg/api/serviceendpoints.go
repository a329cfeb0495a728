package api

import (
	"net/netip"
	"slices"
)

// ServiceEndpoints is what routed's controllers resolved of one
// Kubernetes Service that a policy rule names (services: {name,
// namespace}): the addresses of the endpoints its EndpointSlices list,
// and their ports. felix matches service rules against it: a
// destination match against address . protocol . port, a source match
// against the addresses. Its name and namespace are the Service's.
//
// Only the controllers write it (they resolve only the Services some
// rule names, and delete the record when the Service or the last rule
// naming it is gone); Validate refuses one without their owner
// annotation, so `routedctl apply` of a hand-written record is refused.
type ServiceEndpoints struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta           `json:"metadata"`
	Spec     ServiceEndpointsSpec `json:"spec"`
}

// ServiceEndpointsSpec lists a Service's endpoints, grouped by the ports
// they serve.
type ServiceEndpointsSpec struct {
	// Subsets are the endpoints that serve the same ports: the
	// endpoints of the EndpointSlices with the same port list, merged.
	// A Service with no endpoints has none, and matches nothing.
	Subsets []ServiceSubset `json:"subsets,omitempty"`
}

// ServiceSubset is endpoint addresses and the ports each of them serves.
type ServiceSubset struct {
	// Addresses are single IPv4 or IPv6 addresses, sorted.
	Addresses []string `json:"addresses,omitempty"`
	// Ports are the ports every address serves, sorted.
	Ports []ServicePort `json:"ports,omitempty"`
}

// ServicePort is one port of a Service's endpoints (the EndpointSlice's
// port: the pod's target port, not the Service's own port).
type ServicePort struct {
	// Name is the Service port's name (may be empty).
	Name string `json:"name,omitempty"`
	// Protocol is TCP, UDP or SCTP.
	Protocol Protocol `json:"protocol"`
	Port     uint16   `json:"port"`
}

// The annotation that marks what routed's controllers wrote; a
// ServiceEndpoints record must carry it.
const (
	ControllersOwnerAnnotation = "routed.io/owner"
	ControllersOwnerValue      = "routed-controllers"
)

// GetKind implements Resource.
func (s *ServiceEndpoints) GetKind() Kind { return KindServiceEndpoints }

// Meta implements Resource.
func (s *ServiceEndpoints) Meta() *ObjectMeta { return &s.Metadata }

func (s *ServiceEndpoints) setDefaults() {}

// Validate implements Resource.
func (s *ServiceEndpoints) Validate() error {
	var v errs
	validateMeta(&v, KindServiceEndpoints, &s.Metadata)
	if s.Metadata.Annotations[ControllersOwnerAnnotation] != ControllersOwnerValue {
		v.add("metadata.annotations", nil, "%s records are written by routed's controllers from the Service's EndpointSlices, never by hand (they carry %s: %s); name the Service in a rule and the controllers keep its record",
			KindServiceEndpoints, ControllersOwnerAnnotation, ControllersOwnerValue)
	}
	for i, sub := range s.Spec.Subsets {
		f := indexed("spec.subsets", i)
		for j, a := range sub.Addresses {
			if _, err := netip.ParseAddr(a); err != nil {
				v.add(indexed(f+".addresses", j), a, "is not an IP address")
			}
		}
		for j, p := range sub.Ports {
			pf := indexed(f+".ports", j)
			if n, ok := p.Protocol.Num(); !ok || !slices.Contains([]uint8{6, 17, 132}, n) {
				v.add(pf+".protocol", p.Protocol.String(), "must be TCP, UDP or SCTP")
			}
			if p.Port == 0 {
				v.add(pf+".port", p.Port, "must be 1-65535")
			}
		}
	}
	return v.result(KindServiceEndpoints, StoreName(s))
}
