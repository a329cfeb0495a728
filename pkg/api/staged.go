package api

import (
	"errors"
	"reflect"
)

// StagedAction says what a staged policy would do once enforced: Set
// (the default) adds or replaces its enforced twin, Delete removes it.
type StagedAction string

// The staged actions.
const (
	StagedActionSet    StagedAction = "Set"
	StagedActionDelete StagedAction = "Delete"
)

// The staged kinds are stored and validated like their enforced twins
// and never enforced: none of them implements Policy, so nothing that
// programs policy (felix, the explain model's SetResource) takes them.
// The twin of a staged policy is the enforced policy of the same
// namespace and name (for a StagedKubernetesNetworkPolicy, the
// Kubernetes NetworkPolicy of that name, which the controllers store as
// "knp.default.<name>").

// StagedNetworkPolicy is a NetworkPolicy that is stored and never
// enforced: operators see what it would decide before enforcing it.
type StagedNetworkPolicy struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta              `json:"metadata"`
	Spec     StagedNetworkPolicySpec `json:"spec"`
}

// StagedNetworkPolicySpec is Calico's v3 StagedNetworkPolicySpec.
type StagedNetworkPolicySpec struct {
	StagedAction      StagedAction `json:"stagedAction,omitempty"`
	NetworkPolicySpec `json:",inline"`
}

// StagedGlobalNetworkPolicy is a GlobalNetworkPolicy that is stored and
// never enforced.
type StagedGlobalNetworkPolicy struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta                    `json:"metadata"`
	Spec     StagedGlobalNetworkPolicySpec `json:"spec"`
}

// StagedGlobalNetworkPolicySpec is Calico's v3 StagedGlobalNetworkPolicySpec.
type StagedGlobalNetworkPolicySpec struct {
	StagedAction            StagedAction `json:"stagedAction,omitempty"`
	GlobalNetworkPolicySpec `json:",inline"`
}

// StagedKubernetesNetworkPolicy is a Kubernetes NetworkPolicy that is
// stored and never enforced.
type StagedKubernetesNetworkPolicy struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta                        `json:"metadata"`
	Spec     StagedKubernetesNetworkPolicySpec `json:"spec"`
}

// StagedKubernetesNetworkPolicySpec is Calico's v3
// StagedKubernetesNetworkPolicySpec: a Kubernetes NetworkPolicy's spec
// (staged_k8s.go) and the staged action.
type StagedKubernetesNetworkPolicySpec struct {
	StagedAction         StagedAction `json:"stagedAction,omitempty"`
	K8sNetworkPolicySpec `json:",inline"`
}

// orSet is the staged action, Set when none is given.
func (a StagedAction) orSet() StagedAction {
	if a == "" {
		return StagedActionSet
	}
	return a
}

// twinMeta is the metadata an enforced twin gets from its staged
// policy: what names and labels it, not the staged object's own
// datastore bookkeeping.
func twinMeta(m ObjectMeta) ObjectMeta {
	return ObjectMeta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}
}

// Enforced returns the NetworkPolicy p stands for: for Set, the policy
// it would add or replace; for Delete, the twin it would remove (only
// its namespace and name mean anything then).
func (p *StagedNetworkPolicy) Enforced() *NetworkPolicy {
	return &NetworkPolicy{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindNetworkPolicy},
		Metadata: twinMeta(p.Metadata), Spec: p.Spec.NetworkPolicySpec}
}

// Enforced returns the GlobalNetworkPolicy p stands for (see
// StagedNetworkPolicy.Enforced).
func (p *StagedGlobalNetworkPolicy) Enforced() *GlobalNetworkPolicy {
	return &GlobalNetworkPolicy{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: KindGlobalNetworkPolicy},
		Metadata: twinMeta(p.Metadata), Spec: p.Spec.GlobalNetworkPolicySpec}
}

// Action returns p's staged action (Set when none is given).
func (p *StagedNetworkPolicy) Action() StagedAction { return p.Spec.StagedAction.orSet() }

// Action returns p's staged action (Set when none is given).
func (p *StagedGlobalNetworkPolicy) Action() StagedAction { return p.Spec.StagedAction.orSet() }

// Action returns p's staged action (Set when none is given).
func (p *StagedKubernetesNetworkPolicy) Action() StagedAction { return p.Spec.StagedAction.orSet() }

// GetKind implements Resource.
func (p *StagedNetworkPolicy) GetKind() Kind { return KindStagedNetworkPolicy }

// Meta implements Resource.
func (p *StagedNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

// setDefaults gives a Set policy its twin's defaults (tier, types,
// nets written as CIDRs); a Delete policy only its tier, as Calico
// does: its spec must otherwise stay empty.
func (p *StagedNetworkPolicy) setDefaults() {
	defaultNamespace(&p.Metadata)
	p.Spec.NetworkPolicySpec = stagedDefaults(&p.Spec.StagedAction, p.Enforced()).Spec
}

// Validate implements Resource: the name and spec as the twin
// NetworkPolicy's, or for Delete an empty spec but for the tier.
func (p *StagedNetworkPolicy) Validate() error {
	empty := p.Enforced()
	empty.Spec = NetworkPolicySpec{PolicySpec: PolicySpec{Tier: p.Spec.Tier}}
	return validateStaged(p, p.Spec.StagedAction, p.Enforced(), empty)
}

// GetKind implements Resource.
func (p *StagedGlobalNetworkPolicy) GetKind() Kind { return KindStagedGlobalNetworkPolicy }

// Meta implements Resource.
func (p *StagedGlobalNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

// setDefaults: see StagedNetworkPolicy.setDefaults.
func (p *StagedGlobalNetworkPolicy) setDefaults() {
	p.Spec.GlobalNetworkPolicySpec = stagedDefaults(&p.Spec.StagedAction, p.Enforced()).Spec
}

// Validate implements Resource: see StagedNetworkPolicy.Validate.
func (p *StagedGlobalNetworkPolicy) Validate() error {
	empty := p.Enforced()
	empty.Spec = GlobalNetworkPolicySpec{PolicySpec: PolicySpec{Tier: p.Spec.Tier}}
	return validateStaged(p, p.Spec.StagedAction, p.Enforced(), empty)
}

// GetKind implements Resource.
func (p *StagedKubernetesNetworkPolicy) GetKind() Kind { return KindStagedKubernetesNetworkPolicy }

// Meta implements Resource.
func (p *StagedKubernetesNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

// setDefaults fills policyTypes as the Kubernetes API server does for a
// NetworkPolicy (Ingress, and Egress when there are egress rules), so
// the converted policy keeps its egress rules.
func (p *StagedKubernetesNetworkPolicy) setDefaults() {
	defaultNamespace(&p.Metadata)
	p.Spec.StagedAction = p.Spec.StagedAction.orSet()
	if p.Spec.StagedAction == StagedActionSet {
		p.Spec.K8sNetworkPolicySpec.setDefaults()
	}
}

// Validate implements Resource: the metadata as any namespaced
// resource's (a Kubernetes NetworkPolicy is named by a DNS subdomain),
// the spec as Kubernetes validates a NetworkPolicy's, or for Delete an
// empty spec.
func (p *StagedKubernetesNetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindStagedKubernetesNetworkPolicy, &p.Metadata)
	switch p.Action() {
	case StagedActionSet:
		p.Spec.K8sNetworkPolicySpec.validate(&v)
	case StagedActionDelete:
		if !reflect.DeepEqual(p.Spec.K8sNetworkPolicySpec, K8sNetworkPolicySpec{}) {
			v.add("spec", nil, "must be empty but for stagedAction when stagedAction is Delete (the twin is removed whatever the spec says)")
		}
	default:
		badStagedAction(&v, p.Spec.StagedAction)
	}
	return v.result(KindStagedKubernetesNetworkPolicy, StoreName(p))
}

// calicoTwin is the enforced twin of a Calico staged kind
// (*NetworkPolicy, *GlobalNetworkPolicy): both staged kinds are
// defaulted and validated through it.
type calicoTwin interface {
	Policy
	setDefaults()
}

// stagedDefaults defaults the staged action to Set and returns twin (a
// staged policy's Enforced) with the defaults its spec gets: for Set
// its kind's own (tier, types, nets written as CIDRs); for Delete only
// its tier and, as Calico does, no types (they say nothing about a
// removal).
func stagedDefaults[T calicoTwin](a *StagedAction, twin T) T {
	*a = a.orSet()
	if *a == StagedActionSet {
		twin.setDefaults()
		return twin
	}
	s := twin.Policy()
	if s.Tier == "" {
		s.Tier = DefaultTierName
	}
	s.Types = nil
	return twin
}

// validateStaged validates staged policy r through its twin: for Set
// the policy it would set (names, selectors, rules, as that kind's
// Validate checks them), for Delete the twin with only r's name and
// tier (emptyTwin), and r's spec must be empty but for the tier, that
// is twin must equal emptyTwin (Calico's rule: the policy is removed
// whatever it says, so anything written there is a mistake the
// operator should hear about).
func validateStaged(r Resource, a StagedAction, twin, emptyTwin calicoTwin) error {
	var v errs
	switch a.orSet() {
	case StagedActionSet:
		v.take(twin.Validate())
	case StagedActionDelete:
		v.take(emptyTwin.Validate())
		if !reflect.DeepEqual(twin, emptyTwin) {
			v.add("spec", nil, "must be empty but for stagedAction and tier when stagedAction is Delete (the twin is removed whatever the spec says)")
		}
	default:
		badStagedAction(&v, a)
	}
	return v.result(r.GetKind(), StoreName(r))
}

func badStagedAction(v *errs, a StagedAction) {
	v.add("spec.stagedAction", a, "must be Set or Delete (Calico's Learn and Ignore are not supported)")
}

// take adds the field errors of a twin's validation; any other error
// is kept as one problem of the whole object.
func (v *errs) take(err error) {
	if err == nil {
		return
	}
	var ve *ValidationError
	if errors.As(err, &ve) {
		v.list = append(v.list, ve.Fields...)
		return
	}
	v.add("spec", nil, "%v", err)
}
