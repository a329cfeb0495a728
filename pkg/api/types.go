package api

import (
	"fmt"
	"strings"
)

// APIVersion is the apiVersion routed writes and reads natively.
const APIVersion = "routed.io/v1"

// CalicoAPIVersion is Calico's apiVersion, accepted on input for the kinds
// Calico shares with routed so operators can bring existing files.
const CalicoAPIVersion = "projectcalico.org/v3"

// CalicoCRDAPIVersion is the form Calico keeps its resources in as
// Kubernetes custom resources (what `kubectl get ippools.crd.projectcalico.org
// -o yaml` prints); read like CalicoAPIVersion.
const CalicoCRDAPIVersion = "crd.projectcalico.org/v1"

// isCalico reports whether apiVersion is one of Calico's forms.
func isCalico(apiVersion string) bool {
	return apiVersion == CalicoAPIVersion || apiVersion == CalicoCRDAPIVersion
}

// Kind names a resource type, as written in the "kind" field.
type Kind string

// The resource kinds routed knows.
const (
	KindIPPool              Kind = "IPPool"
	KindNode                Kind = "Node"
	KindBGPConfiguration    Kind = "BGPConfiguration"
	KindBGPPeer             Kind = "BGPPeer"
	KindWorkloadEndpoint    Kind = "WorkloadEndpoint"
	KindIPAMConfiguration   Kind = "IPAMConfiguration"
	KindBGPFilter           Kind = "BGPFilter"
	KindTier                Kind = "Tier"
	KindProfile             Kind = "Profile"
	KindGlobalNetworkSet    Kind = "GlobalNetworkSet"
	KindNetworkSet          Kind = "NetworkSet"
	KindGlobalNetworkPolicy Kind = "GlobalNetworkPolicy"
	KindNetworkPolicy       Kind = "NetworkPolicy"
	KindHostEndpoint        Kind = "HostEndpoint"
	// The staged kinds are stored and validated like their enforced
	// twins and never enforced (Calico's policy preview).
	KindStagedNetworkPolicy           Kind = "StagedNetworkPolicy"
	KindStagedGlobalNetworkPolicy     Kind = "StagedGlobalNetworkPolicy"
	KindStagedKubernetesNetworkPolicy Kind = "StagedKubernetesNetworkPolicy"
	KindIPReservation                 Kind = "IPReservation"
	KindFelixConfiguration            Kind = "FelixConfiguration"
	// KindServiceEndpoints is written by the controllers only: the
	// endpoints of a Kubernetes Service that a policy rule names.
	KindServiceEndpoints Kind = "ServiceEndpoints"
)

// Kinds lists every kind in the order routedctl prints and applies them:
// pools and configuration before the objects that refer to them, tiers
// before their policies.
var Kinds = []Kind{KindIPAMConfiguration, KindIPPool, KindIPReservation, KindFelixConfiguration, KindBGPConfiguration, KindBGPFilter,
	KindNode, KindBGPPeer, KindWorkloadEndpoint, KindHostEndpoint,
	KindTier, KindProfile, KindGlobalNetworkSet, KindNetworkSet, KindGlobalNetworkPolicy, KindNetworkPolicy,
	KindStagedGlobalNetworkPolicy, KindStagedNetworkPolicy, KindStagedKubernetesNetworkPolicy, KindServiceEndpoints}

// Plural is the lower-case plural used in datastore keys and by routedctl.
func (k Kind) Plural() string {
	switch k {
	case KindIPAMConfiguration:
		return "ipamconfigurations"
	case KindBGPConfiguration:
		return "bgpconfigurations"
	case KindNetworkPolicy:
		return "networkpolicies"
	case KindGlobalNetworkPolicy:
		return "globalnetworkpolicies"
	case KindStagedNetworkPolicy:
		return "stagednetworkpolicies"
	case KindStagedGlobalNetworkPolicy:
		return "stagedglobalnetworkpolicies"
	case KindStagedKubernetesNetworkPolicy:
		return "stagedkubernetesnetworkpolicies"
	case KindFelixConfiguration:
		return "felixconfigurations"
	case KindServiceEndpoints:
		return "serviceendpoints"
	}
	return strings.ToLower(string(k)) + "s"
}

// ParseKind accepts a kind as users type it: "ippool", "ippools", "IPPool",
// "bgppeer", "wep" and so on.
func ParseKind(s string) (Kind, error) {
	l := strings.ToLower(s)
	for _, k := range Kinds {
		if l == strings.ToLower(string(k)) || l == k.Plural() {
			return k, nil
		}
	}
	switch l {
	case "pool", "pools":
		return KindIPPool, nil
	case "wep", "weps":
		return KindWorkloadEndpoint, nil
	case "bgpconfig", "bgpconfigs":
		return KindBGPConfiguration, nil
	case "ipamconfig", "ipamconfigs":
		return KindIPAMConfiguration, nil
	case "policy", "policies", "netpol", "netpols", "np":
		return KindNetworkPolicy, nil
	case "globalpolicy", "globalpolicies", "gnp", "gnps":
		return KindGlobalNetworkPolicy, nil
	case "netset", "netsets":
		return KindNetworkSet, nil
	case "globalnetset", "globalnetsets", "gns":
		return KindGlobalNetworkSet, nil
	case "pro", "pros":
		return KindProfile, nil
	case "hep", "heps":
		return KindHostEndpoint, nil
	case "snp", "snps":
		return KindStagedNetworkPolicy, nil
	case "sgnp", "sgnps":
		return KindStagedGlobalNetworkPolicy, nil
	case "sknp", "sknps":
		return KindStagedKubernetesNetworkPolicy, nil
	case "felixconfig", "felixconfigs":
		return KindFelixConfiguration, nil
	}
	known := make([]string, len(Kinds))
	for i, k := range Kinds {
		known[i] = strings.ToLower(string(k))
	}
	return "", fmt.Errorf("%w: %q (known: %s)", ErrUnknownKind, s, strings.Join(known, ", "))
}

// Namespaced reports whether resources of the kind live in a Kubernetes
// namespace (metadata.namespace), as Calico's NetworkPolicy and
// NetworkSet do.
func (k Kind) Namespaced() bool {
	switch k {
	case KindNetworkPolicy, KindNetworkSet, KindStagedNetworkPolicy, KindStagedKubernetesNetworkPolicy, KindServiceEndpoints:
		return true
	}
	return false
}

// StoreName is the name r is stored and watched under: its name, or for
// a namespaced kind "<namespace>.<name>" (namespaces are DNS labels
// without dots, so the first dot splits it again: SplitStoreName).
// datastore keys, Get, Delete and sync events use this name.
func StoreName(r Resource) string {
	return NamespacedName(r.GetKind(), r.Meta().Namespace, r.Meta().Name)
}

// NamespacedName is the store name of the object name in namespace, for
// kind k; namespace is ignored for kinds without one.
func NamespacedName(k Kind, namespace, name string) string {
	if !k.Namespaced() {
		return name
	}
	return namespace + "." + name
}

// SplitStoreName undoes StoreName for kind k.
func SplitStoreName(k Kind, storeName string) (namespace, name string) {
	if !k.Namespaced() {
		return "", storeName
	}
	namespace, name, _ = strings.Cut(storeName, ".")
	return namespace, name
}

// TypeMeta is the apiVersion/kind header of every resource.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       Kind   `json:"kind"`
}

// ObjectMeta is the metadata of every resource.
type ObjectMeta struct {
	Name string `json:"name"`
	// Namespace is set for namespaced kinds only (Kind.Namespaced).
	Namespace string `json:"namespace,omitempty"`
	// ResourceVersion is the datastore revision the object was read at.
	// Updates and deletes succeed only if it is still current.
	ResourceVersion   string            `json:"resourceVersion,omitempty"`
	CreationTimestamp string            `json:"creationTimestamp,omitempty"`
	UID               string            `json:"uid,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
}

// Resource is implemented by every resource type.
type Resource interface {
	// GetKind returns the resource's kind.
	GetKind() Kind
	// Meta returns the resource's metadata for reading and writing.
	Meta() *ObjectMeta
	// Validate checks the spec on its own; checks across resources (pool
	// overlap) are done by ValidateAgainst.
	Validate() error
	// setDefaults fills unset optional fields with their defaults.
	setDefaults()
}

// New returns an empty resource of the given kind with its TypeMeta set.
func New(k Kind) (Resource, error) {
	tm := TypeMeta{APIVersion: APIVersion, Kind: k}
	switch k {
	case KindIPPool:
		return &IPPool{TypeMeta: tm}, nil
	case KindNode:
		return &Node{TypeMeta: tm}, nil
	case KindBGPConfiguration:
		return &BGPConfiguration{TypeMeta: tm}, nil
	case KindBGPPeer:
		return &BGPPeer{TypeMeta: tm}, nil
	case KindWorkloadEndpoint:
		return &WorkloadEndpoint{TypeMeta: tm}, nil
	case KindIPAMConfiguration:
		return &IPAMConfiguration{TypeMeta: tm}, nil
	case KindBGPFilter:
		return &BGPFilter{TypeMeta: tm}, nil
	case KindTier:
		return &Tier{TypeMeta: tm}, nil
	case KindProfile:
		return &Profile{TypeMeta: tm}, nil
	case KindGlobalNetworkSet:
		return &GlobalNetworkSet{TypeMeta: tm}, nil
	case KindNetworkSet:
		return &NetworkSet{TypeMeta: tm}, nil
	case KindGlobalNetworkPolicy:
		return &GlobalNetworkPolicy{TypeMeta: tm}, nil
	case KindNetworkPolicy:
		return &NetworkPolicy{TypeMeta: tm}, nil
	case KindHostEndpoint:
		return &HostEndpoint{TypeMeta: tm}, nil
	case KindStagedNetworkPolicy:
		return &StagedNetworkPolicy{TypeMeta: tm}, nil
	case KindStagedGlobalNetworkPolicy:
		return &StagedGlobalNetworkPolicy{TypeMeta: tm}, nil
	case KindStagedKubernetesNetworkPolicy:
		return &StagedKubernetesNetworkPolicy{TypeMeta: tm}, nil
	case KindIPReservation:
		return &IPReservation{TypeMeta: tm}, nil
	case KindFelixConfiguration:
		return &FelixConfiguration{TypeMeta: tm}, nil
	case KindServiceEndpoints:
		return &ServiceEndpoints{TypeMeta: tm}, nil
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownKind, k)
}

// SetDefaults fills unset optional fields of r with their defaults.
func SetDefaults(r Resource) { r.setDefaults() }
