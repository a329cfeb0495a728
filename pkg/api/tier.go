package api

// The tiers that exist from the start, with Calico's orders: kube-admin
// (Kubernetes' admin network policies) first, then default, then
// kube-baseline.
const (
	KubeAdminTierName     = "kube-admin"
	KubeBaselineTierName  = "kube-baseline"
	KubeAdminTierOrder    = 1_000
	DefaultTierOrder      = 1_000_000
	KubeBaselineTierOrder = 10_000_000
)

// Tier groups policies: tiers are evaluated in Order (nil last, equal
// orders by name); in a tier that has a policy selecting the endpoint,
// the first Allow or Deny decides, Pass goes on to the next tier, and a
// packet that no rule matched gets DefaultAction.
type Tier struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     TierSpec   `json:"spec"`
}

// TierSpec is Calico's v3 TierSpec.
type TierSpec struct {
	Order *float64 `json:"order,omitempty"`
	// DefaultAction is Deny (the default) or Pass.
	DefaultAction *Action `json:"defaultAction,omitempty"`
}

// wellKnownTiers are the tiers that always exist, with the order and
// default action Calico fixes for them: the Kubernetes admin and
// baseline tiers pass what their policies do not decide.
var wellKnownTiers = map[string]TierSpec{
	KubeAdminTierName:    {Order: ptr(float64(KubeAdminTierOrder)), DefaultAction: ptr(ActionPass)},
	DefaultTierName:      {Order: ptr(float64(DefaultTierOrder)), DefaultAction: ptr(ActionDeny)},
	KubeBaselineTierName: {Order: ptr(float64(KubeBaselineTierOrder)), DefaultAction: ptr(ActionPass)},
}

func ptr[T any](v T) *T { return &v }

// DefaultTiers returns the tiers routed creates when they are missing:
// kube-admin (order 1000, Pass), default (1e6, Deny) and kube-baseline
// (1e7, Pass), as Calico has them.
func DefaultTiers() []*Tier {
	var out []*Tier
	for _, name := range []string{KubeAdminTierName, DefaultTierName, KubeBaselineTierName} {
		w := wellKnownTiers[name]
		out = append(out, &Tier{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindTier}, Metadata: ObjectMeta{Name: name},
			Spec: TierSpec{Order: ptr(*w.Order), DefaultAction: ptr(*w.DefaultAction)}})
	}
	return out
}

// GetKind implements Resource.
func (t *Tier) GetKind() Kind { return KindTier }

// Meta implements Resource.
func (t *Tier) Meta() *ObjectMeta { return &t.Metadata }

func (t *Tier) setDefaults() {
	if w, ok := wellKnownTiers[t.Metadata.Name]; ok {
		if t.Spec.Order == nil {
			t.Spec.Order = ptr(*w.Order)
		}
		if t.Spec.DefaultAction == nil {
			t.Spec.DefaultAction = ptr(*w.DefaultAction)
		}
	}
	if t.Spec.DefaultAction == nil {
		a := ActionDeny
		t.Spec.DefaultAction = &a
	}
}

// Profile is Calico's Profile: labels that the endpoints naming it in
// spec.profiles inherit (their own labels win), and rules that apply to
// them when no policy selects them in a direction. Kubernetes namespaces
// and service accounts become profiles kns.<ns> and ksa.<ns>.<sa>.
type Profile struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta  `json:"metadata"`
	Spec     ProfileSpec `json:"spec"`
}

// ProfileSpec is Calico's v3 ProfileSpec.
type ProfileSpec struct {
	Ingress       []Rule            `json:"ingress,omitempty"`
	Egress        []Rule            `json:"egress,omitempty"`
	LabelsToApply map[string]string `json:"labelsToApply,omitempty"`
}

// GetKind implements Resource.
func (p *Profile) GetKind() Kind { return KindProfile }

// Meta implements Resource.
func (p *Profile) Meta() *ObjectMeta { return &p.Metadata }

func (p *Profile) setDefaults() {
	normalizeRules(p.Spec.Ingress)
	normalizeRules(p.Spec.Egress)
}

// NetworkSet is a labelled list of CIDRs in one namespace that rule
// selectors match like endpoints. It is stored under StoreName.
type NetworkSet struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta     `json:"metadata"`
	Spec     NetworkSetSpec `json:"spec"`
}

// NetworkSetSpec is Calico's v3 NetworkSetSpec (and
// GlobalNetworkSetSpec): the CIDRs in the set.
type NetworkSetSpec struct {
	Nets []string `json:"nets,omitempty"`
}

// GlobalNetworkSet is a labelled list of CIDRs that rule selectors of
// every namespace may match.
type GlobalNetworkSet struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta     `json:"metadata"`
	Spec     NetworkSetSpec `json:"spec"`
}

// GetKind implements Resource.
func (s *NetworkSet) GetKind() Kind { return KindNetworkSet }

// Meta implements Resource.
func (s *NetworkSet) Meta() *ObjectMeta { return &s.Metadata }

func (s *NetworkSet) setDefaults() {
	defaultNamespace(&s.Metadata)
	normalizeNets(s.Spec.Nets)
}

// GetKind implements Resource.
func (s *GlobalNetworkSet) GetKind() Kind { return KindGlobalNetworkSet }

// Meta implements Resource.
func (s *GlobalNetworkSet) Meta() *ObjectMeta { return &s.Metadata }

func (s *GlobalNetworkSet) setDefaults() { normalizeNets(s.Spec.Nets) }
