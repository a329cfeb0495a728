package controllers

import (
	"encoding/json"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/routed-net/routed/pkg/api"
)

// fullSpec sets every field of a Kubernetes NetworkPolicySpec.
func fullSpec() networkingv1.NetworkPolicySpec {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"role": "frontend"},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a", "b"}}}}
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"role": "db"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpExists}}},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: proto(corev1.ProtocolTCP), Port: port(6379)}, {Protocol: proto(corev1.ProtocolSCTP), Port: named("web")},
				{Protocol: proto(corev1.ProtocolUDP), Port: port(5000), EndPort: i32(5010)}},
			From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "172.17.0.0/16", Except: []string{"172.17.1.0/24"}}},
				{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: sel}},
		}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{
			Ports: []networkingv1.NetworkPolicyPort{{Port: port(53)}},
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel}},
		}, {}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
	}
}

// TestStagedKubernetesKeepsEveryField: a Kubernetes NetworkPolicySpec
// with every field set, written into a StagedKubernetesNetworkPolicy
// document, decodes and validates in pkg/api and comes back to
// Kubernetes' type unchanged, so routed's copy of the type holds all of
// it; its conversion is the controllers' conversion of the policy
// itself.
func TestStagedKubernetesKeepsEveryField(t *testing.T) {
	t.Parallel()
	want := np("web", fullSpec())
	spec, err := json.Marshal(want.Spec)
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"apiVersion": "projectcalico.org/v3", "kind": "StagedKubernetesNetworkPolicy", "metadata": {"name": "web", "namespace": "ns1"}, "spec": ` + string(spec) + `}`
	d, err := api.Decode([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	s := d.Resources[0].(*api.StagedKubernetesNetworkPolicy)
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	got, err := StagedKubernetesNetworkPolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec, want.Spec) {
		back, _ := json.Marshal(got.Spec)
		t.Fatalf("spec changed on the way:\nsent %s\ngot  %s", spec, back)
	}
	if got.Name != "web" || got.Namespace != "ns1" {
		t.Errorf("metadata: %+v", got.ObjectMeta)
	}
	c, err := ConvertStagedKubernetesNetworkPolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	direct := ConvertNetworkPolicy(want)
	if !reflect.DeepEqual(c, direct) {
		t.Errorf("staged conversion differs from the policy's:\n%+v\n%+v", c.Policy, direct.Policy)
	}
	if c.Policy.Metadata.Name != "knp.default.web" || len(c.Problems) != 0 {
		t.Errorf("conversion: %s, problems %v", c.Policy.Metadata.Name, c.Problems)
	}
}
