package api

// Calico's name formats: a namespace or tier is a DNS label (no dots:
// StoreName's "<namespace>.<name>" splits at the first one, and tier
// names prefix policy names); a NetworkPolicy name is a label with an
// optional "<tier>." prefix, or the "knp.default."/"ossg.default." names
// Calico gives converted Kubernetes policies; a GlobalNetworkPolicy name
// a label with an optional "<tier>." prefix, or the "kcnp.kube-admin."/
// "kcnp.kube-baseline." names of converted ClusterNetworkPolicies (their
// Kubernetes names are DNS subdomains, dots included).
var (
	labelRE      = lazyRegexp(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	policyNameRE = lazyRegexp(`^(` + labelFmt + `(\.` + labelFmt + `)?|(knp|ossg)\.default\.` + labelFmt + `(\.` + labelFmt + `)*)$`)
	gnpNameRE    = lazyRegexp(`^((` + labelFmt + `\.)?` + labelFmt + `|kcnp\.(kube-admin|kube-baseline)\.` + labelFmt + `(\.` + labelFmt + `)*)$`)
)

const labelFmt = `[a-z0-9]([-a-z0-9]*[a-z0-9])?`

// validateMeta checks the name, labels, and the namespace against the
// kind: required (a DNS label) for namespaced kinds, refused for others.
func validateMeta(v *errs, k Kind, m *ObjectMeta) {
	validateName(v, m.Name)
	validateLabels(v, "metadata.labels", m.Labels)
	switch {
	case !k.Namespaced() && m.Namespace != "":
		v.add("metadata.namespace", m.Namespace, "%s is not namespaced; remove metadata.namespace", k)
	case k.Namespaced() && m.Namespace == "":
		v.add("metadata.namespace", nil, "is required for a %s", k)
	case k.Namespaced():
		validateLabelName(v, "metadata.namespace", m.Namespace, "a Kubernetes namespace name")
	}
}

func validateLabelName(v *errs, field, s, what string) {
	if len(s) > 63 || !labelRE().MatchString(s) {
		v.add(field, s, "must be %s: lower-case letters, digits and '-', at most 63, no dots", what)
	}
}

// Validate implements Resource.
func (p *NetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindNetworkPolicy, &p.Metadata)
	if p.Metadata.Name != "" && !policyNameRE().MatchString(p.Metadata.Name) {
		v.add("metadata.name", p.Metadata.Name, "must be a DNS label, optionally after \"<tier>.\" (Calico's policy names)")
	}
	p.Spec.validate(&v)
	return v.result(KindNetworkPolicy, StoreName(p))
}

// Validate implements Resource.
func (p *GlobalNetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindGlobalNetworkPolicy, &p.Metadata)
	if p.Metadata.Name != "" && !gnpNameRE().MatchString(p.Metadata.Name) {
		v.add("metadata.name", p.Metadata.Name, "must be a DNS label, optionally after \"<tier>.\" (Calico's policy names)")
	}
	p.Spec.validate(&v)
	validateSelector(&v, "spec.namespaceSelector", p.Spec.NamespaceSelector)
	p.Spec.validateHost(&v)
	validateServiceNamespaces(&v, p.Spec.Ingress, p.Spec.Egress)
	return v.result(KindGlobalNetworkPolicy, p.Metadata.Name)
}

func (s *PolicySpec) validate(v *errs) {
	if s.Tier == "" {
		v.add("spec.tier", nil, "is required (it defaults to %q)", DefaultTierName)
	} else {
		validateLabelName(v, "spec.tier", s.Tier, "a tier name")
	}
	validateSelector(v, "spec.selector", s.Selector)
	validateSelector(v, "spec.serviceAccountSelector", s.ServiceAccountSelector)
	seen := map[PolicyType]bool{}
	for i, t := range s.Types {
		switch {
		case t != PolicyTypeIngress && t != PolicyTypeEgress:
			v.add(indexed("spec.types", i), t, "must be Ingress or Egress")
		case seen[t]:
			v.add(indexed("spec.types", i), t, "is given twice")
		}
		seen[t] = true
	}
	// Rules of a direction the policy does not apply to would be
	// silently unused; Calico accepts them, and so does routed.
	validateRules(v, "spec.ingress", s.Ingress)
	validateRules(v, "spec.egress", s.Egress)
	for i, h := range s.PerformanceHints {
		if h != "AssumeNeededOnEveryNode" {
			v.add(indexed("spec.performanceHints", i), h, "must be AssumeNeededOnEveryNode")
		}
	}
}

// Validate implements Resource.
func (t *Tier) Validate() error {
	var v errs
	validateMeta(&v, KindTier, &t.Metadata)
	validateLabelName(&v, "metadata.name", t.Metadata.Name, "a tier name")
	a := t.Spec.DefaultAction
	if a != nil && *a != ActionDeny && *a != ActionPass {
		v.add("spec.defaultAction", *a, "must be Deny or Pass")
	}
	if w, ok := wellKnownTiers[t.Metadata.Name]; ok {
		if t.Spec.Order == nil || *t.Spec.Order != *w.Order {
			v.add("spec.order", t.Spec.Order, "the %s tier's order is fixed at %g", t.Metadata.Name, *w.Order)
		}
		if a == nil || *a != *w.DefaultAction {
			v.add("spec.defaultAction", a, "the %s tier's default action is fixed at %s", t.Metadata.Name, *w.DefaultAction)
		}
	}
	return v.result(KindTier, t.Metadata.Name)
}

// Validate implements Resource.
func (p *Profile) Validate() error {
	var v errs
	validateMeta(&v, KindProfile, &p.Metadata)
	validateLabels(&v, "spec.labelsToApply", p.Spec.LabelsToApply)
	validateRules(&v, "spec.ingress", p.Spec.Ingress)
	validateRules(&v, "spec.egress", p.Spec.Egress)
	validateServiceNamespaces(&v, p.Spec.Ingress, p.Spec.Egress)
	return v.result(KindProfile, p.Metadata.Name)
}

// Validate implements Resource.
func (s *NetworkSet) Validate() error {
	var v errs
	validateMeta(&v, KindNetworkSet, &s.Metadata)
	s.Spec.validate(&v)
	return v.result(KindNetworkSet, StoreName(s))
}

// Validate implements Resource.
func (s *GlobalNetworkSet) Validate() error {
	var v errs
	validateMeta(&v, KindGlobalNetworkSet, &s.Metadata)
	s.Spec.validate(&v)
	return v.result(KindGlobalNetworkSet, s.Metadata.Name)
}

func (s *NetworkSetSpec) validate(v *errs) {
	for i, n := range s.Nets {
		if _, err := parseNet(n); err != nil {
			v.add(indexed("spec.nets", i), n, "is not a CIDR")
		}
	}
}
