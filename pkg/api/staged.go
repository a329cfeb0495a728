package api

// StagedAction says what a staged policy would do once enforced: Set
// (the default) adds or replaces its enforced twin, Delete removes it.
type StagedAction string

// The staged actions.
const (
	StagedActionSet    StagedAction = "Set"
	StagedActionDelete StagedAction = "Delete"
)

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
// and the staged action.
type StagedKubernetesNetworkPolicySpec struct {
	StagedAction StagedAction   `json:"stagedAction,omitempty"`
	PodSelector  map[string]any `json:"podSelector,omitempty"`
	Ingress      []any          `json:"ingress,omitempty"`
	Egress       []any          `json:"egress,omitempty"`
	PolicyTypes  []string       `json:"policyTypes,omitempty"`
}

// GetKind implements Resource.
func (p *StagedNetworkPolicy) GetKind() Kind { return KindStagedNetworkPolicy }

// Meta implements Resource.
func (p *StagedNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

func (p *StagedNetworkPolicy) setDefaults() { defaultNamespace(&p.Metadata) }

// Validate implements Resource.
func (p *StagedNetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindStagedNetworkPolicy, &p.Metadata)
	return v.result(KindStagedNetworkPolicy, StoreName(p))
}

// GetKind implements Resource.
func (p *StagedGlobalNetworkPolicy) GetKind() Kind { return KindStagedGlobalNetworkPolicy }

// Meta implements Resource.
func (p *StagedGlobalNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

func (p *StagedGlobalNetworkPolicy) setDefaults() {}

// Validate implements Resource.
func (p *StagedGlobalNetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindStagedGlobalNetworkPolicy, &p.Metadata)
	return v.result(KindStagedGlobalNetworkPolicy, p.Metadata.Name)
}

// GetKind implements Resource.
func (p *StagedKubernetesNetworkPolicy) GetKind() Kind { return KindStagedKubernetesNetworkPolicy }

// Meta implements Resource.
func (p *StagedKubernetesNetworkPolicy) Meta() *ObjectMeta { return &p.Metadata }

func (p *StagedKubernetesNetworkPolicy) setDefaults() { defaultNamespace(&p.Metadata) }

// Validate implements Resource.
func (p *StagedKubernetesNetworkPolicy) Validate() error {
	var v errs
	validateMeta(&v, KindStagedKubernetesNetworkPolicy, &p.Metadata)
	return v.result(KindStagedKubernetesNetworkPolicy, StoreName(p))
}
