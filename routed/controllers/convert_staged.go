package controllers

import (
	"bytes"
	"encoding/json"
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/routed-net/routed/pkg/api"
)

// StagedKubernetesNetworkPolicy returns the Kubernetes NetworkPolicy s
// stages: its namespace, name, labels and annotations, and its spec
// read into Kubernetes' own type (pkg/api keeps the spec in routed's
// field-for-field copy of it; a field that does not carry over is an
// error, never dropped).
func StagedKubernetesNetworkPolicy(s *api.StagedKubernetesNetworkPolicy) (*networkingv1.NetworkPolicy, error) {
	raw, err := json.Marshal(s.Spec.K8sNetworkPolicySpec)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", s.GetKind(), api.StoreName(s), err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Metadata.Namespace, Name: s.Metadata.Name,
			Labels: s.Metadata.Labels, Annotations: s.Metadata.Annotations},
	}
	if err := dec.Decode(&np.Spec); err != nil {
		return nil, fmt.Errorf("%s %s: spec as a Kubernetes NetworkPolicySpec: %w", s.GetKind(), api.StoreName(s), err)
	}
	return np, nil
}

// ConvertStagedKubernetesNetworkPolicy converts s exactly as the
// controllers convert the Kubernetes NetworkPolicy it stages
// (ConvertNetworkPolicy): the Conversion's Policy is the routed
// NetworkPolicy that policy becomes ("knp.default.<name>" in its
// namespace), which a Set would add or replace and a Delete would
// remove (for Delete only its namespace and name mean anything).
func ConvertStagedKubernetesNetworkPolicy(s *api.StagedKubernetesNetworkPolicy) (Conversion, error) {
	np, err := StagedKubernetesNetworkPolicy(s)
	if err != nil {
		return Conversion{}, err
	}
	return ConvertNetworkPolicy(np), nil
}
