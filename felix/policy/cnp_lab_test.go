package policy_test

import (
	"maps"
	"slices"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	npv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/routed-net/routed/felix/policy"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// k8sLab is the lab with its pods marked as Kubernetes pods (as the CNI
// plugin labels them), so that policies converted by routed-controllers
// select them; the policies set are what the controllers would write.
type k8sLab struct {
	*lab
	set map[string]api.Policy // by name, what was set
}

func newK8sLab(t *testing.T) *k8sLab {
	l := &k8sLab{lab: newLab(t), set: map[string]api.Policy{}}
	for _, name := range slices.Sorted(maps.Keys(l.eps)) {
		ep := l.eps[name]
		ep.Labels = maps.Clone(ep.Labels)
		ep.Labels[api.LabelOrchestrator] = "k8s"
		l.eps[name] = ep
		if err := l.m.SetEndpoint(ep); err != nil {
			t.Fatal(err)
		}
	}
	l.apply()
	return l
}

func (l *k8sLab) setPolicy(p api.Policy) {
	l.t.Helper()
	api.SetDefaults(p)
	if err := p.Validate(); err != nil {
		l.t.Fatal(err)
	}
	if err := l.m.SetPolicy(p); err != nil {
		l.t.Fatal(err)
	}
	l.set[p.Meta().Name] = p
}

func (l *k8sLab) cnp(name string, spec npv1beta1.ClusterNetworkPolicySpec) {
	l.t.Helper()
	c := controllers.ConvertClusterNetworkPolicy(&npv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	if len(c.Problems) > 0 {
		l.t.Fatalf("%s: %v", name, c.Problems)
	}
	for _, tier := range []npv1beta1.Tier{npv1beta1.AdminTier, npv1beta1.BaselineTier} {
		if p := l.set[controllers.CNPName(tier, name)]; p != nil && tier != spec.Tier {
			l.m.DeletePolicy(policy.PolicyKey(p))
		}
	}
	l.setPolicy(c.Policy)
}

func (l *k8sLab) knp(ns, name string, spec networkingv1.NetworkPolicySpec) {
	l.t.Helper()
	c := controllers.ConvertNetworkPolicy(&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec})
	if len(c.Problems) > 0 {
		l.t.Fatalf("%s: %v", name, c.Problems)
	}
	l.setPolicy(c.Policy)
}

func (l *k8sLab) remove(name string) {
	l.t.Helper()
	p := l.set[name]
	if p == nil {
		l.t.Fatalf("%s was not set", name)
	}
	l.m.DeletePolicy(policy.PolicyKey(p))
	delete(l.set, name)
}

func labels(kv ...string) metav1.LabelSelector {
	s := metav1.LabelSelector{MatchLabels: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		s.MatchLabels[kv[i]] = kv[i+1]
	}
	return s
}

func podsIn(ns string, kv ...string) *npv1beta1.NamespacedPod {
	return &npv1beta1.NamespacedPod{NamespaceSelector: labels("env", ns), PodSelector: labels(kv...)}
}

func tcp(port int32) []npv1beta1.ClusterNetworkPolicyProtocol {
	return []npv1beta1.ClusterNetworkPolicyProtocol{{TCP: &npv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &npv1beta1.Port{Number: port}}}}
}

func ingressCNP(tier npv1beta1.Tier, prio int32, subject *npv1beta1.NamespacedPod, rules ...npv1beta1.ClusterNetworkPolicyIngressRule) npv1beta1.ClusterNetworkPolicySpec {
	return npv1beta1.ClusterNetworkPolicySpec{Tier: tier, Priority: prio, Subject: npv1beta1.ClusterNetworkPolicySubject{Pods: subject}, Ingress: rules}
}

func from(action npv1beta1.ClusterNetworkPolicyRuleAction, peer npv1beta1.ClusterNetworkPolicyIngressPeer, protos []npv1beta1.ClusterNetworkPolicyProtocol) npv1beta1.ClusterNetworkPolicyIngressRule {
	return npv1beta1.ClusterNetworkPolicyIngressRule{Action: action, From: []npv1beta1.ClusterNetworkPolicyIngressPeer{peer}, Protocols: protos}
}

// allowFrom is a Kubernetes NetworkPolicy in prod selecting app=to that
// allows TCP port from pods of prod labelled app=src.
func allowFrom(to, src string, port int32) networkingv1.NetworkPolicySpec {
	p := intstr.FromInt32(port)
	peer := labels("app", src)
	return networkingv1.NetworkPolicySpec{PodSelector: labels("app", to),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &peer}}, Ports: []networkingv1.NetworkPolicyPort{{Port: &p}}}}}
}

func many(ps ...[]probe) []probe { return slices.Concat(ps...) }

// TestClusterNetworkPolicyAdminTier: ClusterNetworkPolicies of the Admin
// tier, converted as routed-controllers writes them, enforced by real
// nftables on real traffic: Deny beats a NetworkPolicy's Allow, Pass
// defers to the NetworkPolicy, Accept ends evaluation before it, a pod
// selected whose traffic no rule matches is untouched, and the lower
// priority wins.
func TestClusterNetworkPolicyAdminTier(t *testing.T) {
	l := newK8sLab(t)
	l.knp("prod", "b-from-a", allowFrom("b", "a", 8080))
	l.apply()
	l.expect("NetworkPolicy alone", many(both(pass("a", "b", "tcp", 8080)), both(drop("d", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090)))...)

	deny := ingressCNP(npv1beta1.AdminTier, 10, podsIn("prod", "app", "b"),
		from(npv1beta1.ClusterNetworkPolicyRuleActionDeny, npv1beta1.ClusterNetworkPolicyIngressPeer{Pods: podsIn("prod", "app", "a")}, tcp(8080)))
	l.cnp("admin-b", deny)
	l.apply()
	l.expect("admin Deny beats the NetworkPolicy's Allow", many(both(drop("a", "b", "tcp", 8080)),
		// Selected by the admin policy, not matched by it: the
		// NetworkPolicy decides as before.
		both(drop("d", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090)),
		// Pods the admin policy does not select are untouched.
		both(pass("a", "d", "tcp", 8080)))...)

	deny.Ingress[0].Action = npv1beta1.ClusterNetworkPolicyRuleActionPass
	l.cnp("admin-b", deny)
	l.apply()
	l.expect("admin Pass defers to the NetworkPolicy", many(both(pass("a", "b", "tcp", 8080)), both(drop("d", "b", "tcp", 8080)))...)

	deny.Ingress[0].Action = npv1beta1.ClusterNetworkPolicyRuleActionAccept
	deny.Ingress[0].From[0].Pods = podsIn("prod", "app", "d")
	l.cnp("admin-b", deny)
	l.apply()
	l.expect("admin Accept ends evaluation before the NetworkPolicy", many(both(pass("d", "b", "tcp", 8080)), both(pass("a", "b", "tcp", 8080)), both(drop("d", "b", "tcp", 9090)))...)

	// Priority: lower first. Accept c->d 8080 at 5, Deny all from dev at
	// 20; then the other way round.
	accept := ingressCNP(npv1beta1.AdminTier, 5, podsIn("prod", "app", "d"),
		from(npv1beta1.ClusterNetworkPolicyRuleActionAccept, npv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}, tcp(8080)))
	denyDev := ingressCNP(npv1beta1.AdminTier, 20, podsIn("prod", "app", "d"),
		from(npv1beta1.ClusterNetworkPolicyRuleActionDeny, npv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}, nil))
	l.cnp("accept-dev", accept)
	l.cnp("deny-dev", denyDev)
	l.apply()
	l.expect("priority 5 Accept before priority 20 Deny", many(both(pass("c", "d", "tcp", 8080)), both(drop("c", "d", "tcp", 9090)), both(drop("c", "d", "udp", 5353)),
		both(pass("a", "d", "tcp", 9090)))...)
	accept.Priority, denyDev.Priority = 20, 5
	l.cnp("accept-dev", accept)
	l.cnp("deny-dev", denyDev)
	l.apply()
	l.expect("priority 5 Deny before priority 20 Accept", many(both(drop("c", "d", "tcp", 8080)), both(pass("a", "d", "tcp", 8080)))...)

	// Egress: an admin Deny to a network (b's addresses) from a.
	bAddrs := []npv1beta1.CIDR{npv1beta1.CIDR(l.pods["b"].IPv4.String() + "/32"), npv1beta1.CIDR(l.pods["b"].IPv6.String() + "/128")}
	l.cnp("a-not-to-b", npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 1,
		Subject: npv1beta1.ClusterNetworkPolicySubject{Pods: podsIn("prod", "app", "a")},
		Egress: []npv1beta1.ClusterNetworkPolicyEgressRule{{Action: npv1beta1.ClusterNetworkPolicyRuleActionDeny,
			To: []npv1beta1.ClusterNetworkPolicyEgressPeer{{Networks: bAddrs}}}}})
	l.apply()
	l.expect("admin egress Deny to a network", many(both(drop("a", "b", "tcp", 8080)), both(drop("a", "b", "icmp", 0)), both(pass("a", "d", "tcp", 8080)))...)

	for _, n := range []string{"kcnp.kube-admin.admin-b", "kcnp.kube-admin.accept-dev", "kcnp.kube-admin.deny-dev", "kcnp.kube-admin.a-not-to-b"} {
		l.remove(n)
	}
	l.apply()
	l.expect("admin policies removed", many(both(pass("a", "b", "tcp", 8080)), both(drop("d", "b", "tcp", 8080)), both(pass("c", "d", "tcp", 9090)))...)
}

// TestClusterNetworkPolicyBaselineTier: the Baseline tier applies only
// to pods no NetworkPolicy selects; its Pass and unmatched traffic fall
// to Kubernetes' default (allow); a named port matches the pod's port.
func TestClusterNetworkPolicyBaselineTier(t *testing.T) {
	l := newK8sLab(t)
	dev := npv1beta1.ClusterNetworkPolicyIngressPeer{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "dev"}}}
	l.cnp("prod-from-dev", npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.BaselineTier, Priority: 10,
		Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
		Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{
			{Action: npv1beta1.ClusterNetworkPolicyRuleActionAccept, From: []npv1beta1.ClusterNetworkPolicyIngressPeer{dev},
				Protocols: []npv1beta1.ClusterNetworkPolicyProtocol{{DestinationNamedPort: "http"}}},
			{Action: npv1beta1.ClusterNetworkPolicyRuleActionDeny, From: []npv1beta1.ClusterNetworkPolicyIngressPeer{dev}},
		}})
	l.apply()
	l.expect("baseline: named port accepted, the rest from dev denied, from prod untouched", many(
		both(pass("c", "d", "tcp", 8080)), both(drop("c", "d", "tcp", 9090)), both(drop("c", "d", "udp", 5353)), both(drop("c", "d", "icmp", 0)),
		both(pass("a", "d", "tcp", 9090)), both(drop("c", "b", "tcp", 9090)))...)

	// A NetworkPolicy selecting b that allows c: the baseline no longer
	// applies to b (the NetworkPolicy decides, allow and deny), and
	// still does to d.
	p := intstr.FromInt32(9090)
	devSel := labels("env", "dev")
	l.knp("prod", "b-from-dev", networkingv1.NetworkPolicySpec{PodSelector: labels("app", "b"),
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &devSel}}, Ports: []networkingv1.NetworkPolicyPort{{Port: &p}}}}})
	l.apply()
	l.expect("baseline Deny applies only where no NetworkPolicy selects", many(
		both(pass("c", "b", "tcp", 9090)), both(drop("c", "b", "tcp", 8080)), both(drop("a", "b", "tcp", 9090)),
		both(drop("c", "d", "tcp", 9090)), both(pass("c", "d", "tcp", 8080)))...)

	// Pass in the baseline tier: Kubernetes' default, allow.
	l.cnp("prod-from-dev", npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.BaselineTier, Priority: 10,
		Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
		Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Action: npv1beta1.ClusterNetworkPolicyRuleActionPass, From: []npv1beta1.ClusterNetworkPolicyIngressPeer{dev}},
			{Action: npv1beta1.ClusterNetworkPolicyRuleActionDeny, From: []npv1beta1.ClusterNetworkPolicyIngressPeer{dev}}}})
	l.apply()
	l.expect("baseline Pass is Kubernetes' default", many(both(pass("c", "d", "tcp", 9090)), both(pass("c", "d", "udp", 5353)))...)

	// The same policy moved to the Admin tier: its Pass now defers to
	// the NetworkPolicy of b, and d (no NetworkPolicy) is allowed.
	l.cnp("prod-from-dev", npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 10,
		Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
		Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Action: npv1beta1.ClusterNetworkPolicyRuleActionPass, From: []npv1beta1.ClusterNetworkPolicyIngressPeer{dev}}}})
	l.apply()
	l.expect("moved to admin, Pass defers", many(both(pass("c", "b", "tcp", 9090)), both(drop("c", "b", "tcp", 8080)), both(pass("c", "d", "tcp", 9090)))...)
}
