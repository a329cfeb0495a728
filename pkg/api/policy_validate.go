package api

import "regexp"

// namespaceRE is a Kubernetes namespace name (a DNS label): no dots, so
// StoreName's "<namespace>.<name>" splits at the first one.
var namespaceRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// validateMeta checks the name, and the namespace against the kind:
// required (a DNS label) for namespaced kinds, refused for the others.
func validateMeta(v *errs, k Kind, m *ObjectMeta) {
	validateName(v, m.Name)
	validateLabels(v, "metadata.labels", m.Labels)
	switch {
	case !k.Namespaced() && m.Namespace != "":
		v.add("metadata.namespace", m.Namespace, "%s is not namespaced; remove metadata.namespace", k)
	case k.Namespaced() && m.Namespace == "":
		v.add("metadata.namespace", nil, "is required for a %s", k)
	case k.Namespaced() && (len(m.Namespace) > 63 || !namespaceRE.MatchString(m.Namespace)):
		v.add("metadata.namespace", m.Namespace, "must be a Kubernetes namespace name: lower-case letters, digits and '-', at most 63")
	}
}

// Validate implements Resource.
func (p *NetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindNetworkPolicy, &p.Metadata)
	p.Spec.validate(&v)
	return v.result(KindNetworkPolicy, StoreName(p))
}

// Validate implements Resource.
func (p *GlobalNetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindGlobalNetworkPolicy, &p.Metadata)
	p.Spec.validate(&v)
	validateSelector(&v, "spec.namespaceSelector", p.Spec.NamespaceSelector)
	return v.result(KindGlobalNetworkPolicy, p.Metadata.Name)
}

func (s *PolicySpec) validate(v *errs) {
	if s.Tier != "" {
		validateName(v, s.Tier)
	}
	validateSelector(v, "spec.selector", s.Selector)
	validateSelector(v, "spec.serviceAccountSelector", s.ServiceAccountSelector)
}

// Validate implements Resource.
func (t *Tier) Validate() error {
	var v errs
	validateMeta(&v, KindTier, &t.Metadata)
	if a := t.Spec.DefaultAction; a != nil && *a != ActionDeny && *a != ActionPass {
		v.add("spec.defaultAction", *a, "must be Deny or Pass")
	}
	return v.result(KindTier, t.Metadata.Name)
}

// Validate implements Resource.
func (p *Profile) Validate() error {
	var v errs
	validateMeta(&v, KindProfile, &p.Metadata)
	validateLabels(&v, "spec.labelsToApply", p.Spec.LabelsToApply)
	return v.result(KindProfile, p.Metadata.Name)
}

// Validate implements Resource.
func (s *NetworkSet) Validate() error {
	var v errs
	validateMeta(&v, KindNetworkSet, &s.Metadata)
	return v.result(KindNetworkSet, StoreName(s))
}

// Validate implements Resource.
func (s *GlobalNetworkSet) Validate() error {
	var v errs
	validateMeta(&v, KindGlobalNetworkSet, &s.Metadata)
	return v.result(KindGlobalNetworkSet, s.Metadata.Name)
}
