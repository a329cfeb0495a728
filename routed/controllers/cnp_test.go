package controllers

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	npv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

func cnp(name string, spec npv1beta1.ClusterNetworkPolicySpec) *npv1beta1.ClusterNetworkPolicy {
	return &npv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func sel(kv ...string) *metav1.LabelSelector {
	s := &metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func tcpPort(n int32) npv1beta1.ClusterNetworkPolicyProtocol {
	return npv1beta1.ClusterNetworkPolicyProtocol{TCP: &npv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &npv1beta1.Port{Number: n}}}
}

func TestConvertClusterNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name            string
		spec            npv1beta1.ClusterNetworkPolicySpec
		policy          string // name, tier, order, selector, namespaceSelector, types
		ingress, egress string
		problems        int
		problemsHave    string
	}{{
		name: "admin: namespaces subject, Deny from a namespace, priority is the order",
		spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 7,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel("team", "a")},
			Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Name: "no-b", Action: "Deny",
				From: []npv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("team", "b")}}}}},
		policy:  "kcnp.kube-admin.p kube-admin 7 " + orch + " | team == 'a' | [Ingress]",
		ingress: `{"action":"Deny","source":{"selector":"` + orch + `","namespaceSelector":"team == 'b'"},"metadata":{"annotations":{"routed.io/k8s-rule":"no-b"}}}`,
	}, {
		name: "baseline: pods subject with {} namespaces, Accept and Pass egress, ports and a range, networks split by family",
		spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.BaselineTier, Priority: 0,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Pods: &npv1beta1.NamespacedPod{PodSelector: *sel("app", "web")}},
			Egress: []npv1beta1.ClusterNetworkPolicyEgressRule{{Action: "Pass",
				To: []npv1beta1.ClusterNetworkPolicyEgressPeer{{Pods: &npv1beta1.NamespacedPod{NamespaceSelector: *sel("x", "y"), PodSelector: *sel()}}}}, {
				Action: "Accept",
				To:     []npv1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []npv1beta1.CIDR{"10.0.0.0/8", "fd00::/8"}}},
				Protocols: []npv1beta1.ClusterNetworkPolicyProtocol{tcpPort(80), tcpPort(81),
					{UDP: &npv1beta1.ClusterNetworkPolicyProtocolUDP{DestinationPort: &npv1beta1.Port{Range: &npv1beta1.PortRange{Start: 1000, End: 2000}}}}}}}},
		policy: "kcnp.kube-baseline.p kube-baseline 0 " + orch + " && app == 'web' | all() | [Egress]",
		egress: `{"action":"Pass","destination":{"selector":"` + orch + `","namespaceSelector":"x == 'y'"}}
{"action":"Allow","protocol":"TCP","destination":{"nets":["10.0.0.0/8"],"ports":["80:81"]}}
{"action":"Allow","protocol":"TCP","destination":{"nets":["fd00::/8"],"ports":["80:81"]}}
{"action":"Allow","protocol":"UDP","destination":{"nets":["10.0.0.0/8"],"ports":["1000:2000"]}}
{"action":"Allow","protocol":"UDP","destination":{"nets":["fd00::/8"],"ports":["1000:2000"]}}`,
	}, {
		name: "named port: one rule per protocol the pod's port may have",
		spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 1,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel()},
			Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Action: "Accept",
				From:      []npv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel()}},
				Protocols: []npv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}}}}},
		policy: "kcnp.kube-admin.p kube-admin 1 " + orch + " | all() | [Ingress]",
		ingress: `{"action":"Allow","protocol":"TCP","source":{"selector":"` + orch + `","namespaceSelector":"all()"},"destination":{"ports":["http"]}}
{"action":"Allow","protocol":"UDP","source":{"selector":"` + orch + `","namespaceSelector":"all()"},"destination":{"ports":["http"]}}
{"action":"Allow","protocol":"SCTP","source":{"selector":"` + orch + `","namespaceSelector":"all()"},"destination":{"ports":["http"]}}`,
	}, {
		name: "domain names and nodes in an Accept rule: left out, the other peer kept",
		spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 1,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel()},
			Egress: []npv1beta1.ClusterNetworkPolicyEgressRule{{Action: "Accept",
				To: []npv1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []npv1beta1.DomainName{"example.com"}}, {Nodes: sel()}, {Namespaces: sel("a", "b")}}}}},
		policy:       "kcnp.kube-admin.p kube-admin 1 " + orch + " | all() | [Egress]",
		egress:       `{"action":"Allow","destination":{"selector":"` + orch + `","namespaceSelector":"a == 'b'"}}`,
		problems:     2,
		problemsHave: "accepts less",
	}, {
		name: "nodes in a Deny rule: denies its protocols to any peer",
		spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 1,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel()},
			Egress: []npv1beta1.ClusterNetworkPolicyEgressRule{{Action: "Deny",
				To:        []npv1beta1.ClusterNetworkPolicyEgressPeer{{Nodes: sel("role", "x")}},
				Protocols: []npv1beta1.ClusterNetworkPolicyProtocol{tcpPort(22)}}}},
		policy:       "kcnp.kube-admin.p kube-admin 1 " + orch + " | all() | [Egress]",
		egress:       `{"action":"Deny","protocol":"TCP","destination":{"ports":[22]}}`,
		problems:     1,
		problemsHave: "denies its traffic from or to any peer",
	}, {
		name: "Pass with a peer of an unknown kind fails closed: Deny for everything",
		spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.BaselineTier, Priority: 1,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel()},
			Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Action: "Pass",
				From: []npv1beta1.ClusterNetworkPolicyIngressPeer{{}}}}},
		policy:   "kcnp.kube-baseline.p kube-baseline 1 " + orch + " | all() | [Ingress]",
		ingress:  `{"action":"Deny"}`,
		problems: 1,
	}, {
		name:   "no rules: a policy that decides nothing",
		spec:   npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 3, Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel()}},
		policy: "kcnp.kube-admin.p kube-admin 3 " + orch + " | all() | [Ingress]",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := ConvertClusterNetworkPolicy(cnp("p", tc.spec))
			p := c.Policy
			if err := validate(p); err != nil {
				t.Fatalf("invalid: %v", err)
			}
			got := fmt.Sprintf("%s %s %g %s | %s | %v", p.Metadata.Name, p.Spec.Tier, *p.Spec.Order, p.Spec.Selector, p.Spec.NamespaceSelector, p.Spec.Types)
			if got != tc.policy {
				t.Errorf("policy\n got %s\nwant %s", got, tc.policy)
			}
			if g := rulesJSON(t, p.Spec.Ingress); g != tc.ingress {
				t.Errorf("ingress\n got %s\nwant %s", g, tc.ingress)
			}
			if g := rulesJSON(t, p.Spec.Egress); g != tc.egress {
				t.Errorf("egress\n got %s\nwant %s", g, tc.egress)
			}
			if len(c.Problems) != tc.problems || (tc.problemsHave != "" && !strings.Contains(strings.Join(c.Problems, "\n"), tc.problemsHave)) {
				t.Errorf("problems %q, want %d containing %q", c.Problems, tc.problems, tc.problemsHave)
			}
			if !IsOwned(p) || p.Metadata.Annotations[SourceAnnotation] != "p" {
				t.Errorf("annotations %v", p.Metadata.Annotations)
			}
		})
	}
}

func TestCNPNameLongAndTierChange(t *testing.T) {
	long := strings.Repeat("a", 250)
	n := CNPName(npv1beta1.BaselineTier, long)
	if len(n) > maxNameLen || !strings.HasPrefix(n, CNPBaselinePrefix) {
		t.Fatalf("name %q (%d)", n, len(n))
	}
	c := ConvertClusterNetworkPolicy(cnp(long, npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.BaselineTier, Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel()}}))
	if err := validate(c.Policy); err != nil {
		t.Fatal(err)
	}
	if c.Policy.Metadata.Annotations[SourceAnnotation] != long {
		t.Error("the source annotation must keep the real name")
	}
	if CNPName(npv1beta1.AdminTier, "a.b") != "kcnp.kube-admin.a.b" {
		t.Error(CNPName(npv1beta1.AdminTier, "a.b"))
	}
}
