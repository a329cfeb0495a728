package policy_test

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPolicyOrderTieKubernetesNetworkPolicy: a Kubernetes
// NetworkPolicy (order 1000 in the default tier, as the controllers
// write it) ties with a Calico policy of order 1000 as in Calico 3.32,
// whose key for it is the Kubernetes name without "knp.default." and
// kind KubernetesNetworkPolicy: "<name>/<namespace>/<kind>" decides.
// routed compared "knp.default.z-web" with "m-deny" and let z-web allow
// c -> b first, where Calico's m-deny denies it; and it denied what
// Calico's a-web allows before b-deny. A Calico NetworkPolicy that is
// only named "knp.default.<x>" keeps its whole name, as in Calico.
func TestPolicyOrderTieKubernetesNetworkPolicy(t *testing.T) {
	l := newK8sLab(t)
	allowB := networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{}},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
	}
	calico := func(kind, name, action string) string {
		ns := ", namespace: prod"
		if kind == "GlobalNetworkPolicy" {
			ns = ""
		}
		return "apiVersion: projectcalico.org/v3\nkind: " + kind + "\nmetadata: {name: " + name + ns + "}\n" +
			"spec:\n  order: 1000\n  selector: app == 'b'\n  types: [Ingress]\n  ingress: [{action: " + action + "}]\n"
	}
	for _, tc := range []struct {
		name   string
		knp    string // the Kubernetes NetworkPolicy allowing b's ingress
		calico string
		want   bool
	}{
		{"NP m-deny before KNP z-web", "z-web", calico("NetworkPolicy", "m-deny", "Deny"), false},
		{"GNP m-deny before KNP z-web", "z-web", calico("GlobalNetworkPolicy", "m-deny", "Deny"), false},
		{"KNP a-web before NP b-deny", "a-web", calico("NetworkPolicy", "b-deny", "Deny"), true},
		{"KNP web before NP web (kind)", "web", calico("NetworkPolicy", "web", "Deny"), true},
		{"NP knp.default.z (Allow, by its whole name) before NP m-deny", "",
			calico("NetworkPolicy", "knp.default.z", "Allow") + "---\n" + calico("NetworkPolicy", "m-deny", "Deny"), true},
	} {
		if tc.knp != "" {
			l.knp("prod", tc.knp, allowB)
		}
		l.load(tc.calico)
		l.apply()
		l.expect(tc.name, both(probe{from: "c", to: "b", proto: "tcp", port: 8080, want: tc.want})...)
		l.loadOrDelete(tc.calico, true)
		if tc.knp != "" {
			l.remove("knp.default." + tc.knp)
		}
		l.apply()
	}
}
