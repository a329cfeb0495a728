package api

// Service rules (Calico's EntityRule.Services): a rule may name a
// Kubernetes Service in an egress rule's destination (the Service's
// endpoints' addresses and ports) or an ingress rule's source (their
// addresses). Calico's constraints, each refused here with the field:
// the name is required; services stands alone in its entity (no nets,
// notNets, selector, notSelector, namespaceSelector or serviceAccounts
// beside it); a destination with services takes no ports or notPorts
// (the Service's ports are the match); an egress rule cannot name one
// in its source nor an ingress rule in its destination; a
// GlobalNetworkPolicy (and a Profile, which has no namespace either)
// must give the namespace.

// validateServiceMatch checks an entity's services field on its own.
func (e *EntityRule) validateServiceMatch(v *errs, field string) {
	sm := e.Services
	if sm == nil {
		return
	}
	f := field + ".services"
	if sm.Name == "" {
		v.add(f+".name", nil, "is required: the name of the Kubernetes Service whose endpoints the rule matches")
	} else {
		validateLabelName(v, f+".name", sm.Name, "a Kubernetes Service name")
	}
	if sm.Namespace != "" {
		validateLabelName(v, f+".namespace", sm.Namespace, "a Kubernetes namespace name")
	}
	for _, other := range []struct {
		name string
		set  bool
	}{
		{"nets", len(e.Nets) > 0}, {"notNets", len(e.NotNets) > 0},
		{"selector", e.Selector != ""}, {"notSelector", e.NotSelector != ""},
		{"namespaceSelector", e.NamespaceSelector != ""}, {"serviceAccounts", e.ServiceAccounts != nil},
	} {
		if other.set {
			v.add(f, sm.Name, "cannot be combined with %s in the same %s: a service match stands alone (Calico's rule)", other.name, field)
		}
	}
}

// validateServices checks where a rule's service matches are: only in
// an ingress rule's source and an egress rule's destination, and a
// destination's without ports.
func (r *Rule) validateServices(v *errs, field string, ingress bool) {
	if sm := r.Source.Services; sm != nil && !ingress {
		v.add(field+".source.services", sm.Name, "is not allowed in an egress rule's source: name the Service in the destination (its endpoints' addresses and ports)")
	}
	sm := r.Destination.Services
	if sm == nil {
		return
	}
	if ingress {
		v.add(field+".destination.services", sm.Name, "is not allowed in an ingress rule's destination: name the Service in the source (its endpoints' addresses)")
	}
	for _, p := range []struct {
		name string
		l    []Port
	}{{"ports", r.Destination.Ports}, {"notPorts", r.Destination.NotPorts}} {
		if len(p.l) > 0 {
			v.add(field+".destination."+p.name, nil, "cannot be given with destination.services: the Service's own ports are matched")
		}
	}
}

// validateServiceNamespaces refuses a service match without a namespace
// in the rules of a resource that has none of its own (a
// GlobalNetworkPolicy, a Profile): there a Service name alone names
// nothing.
func validateServiceNamespaces(v *errs, ingress, egress []Rule) {
	for _, d := range []struct {
		field string
		rules []Rule
	}{{"spec.ingress", ingress}, {"spec.egress", egress}} {
		for i, r := range d.rules {
			for _, e := range []struct {
				name string
				sm   *ServiceMatch
			}{{"source", r.Source.Services}, {"destination", r.Destination.Services}} {
				if e.sm != nil && e.sm.Namespace == "" {
					v.add(indexed(d.field, i)+"."+e.name+".services.namespace", nil, "is required outside a NetworkPolicy (a NetworkPolicy's rules default to its own namespace)")
				}
			}
		}
	}
}
