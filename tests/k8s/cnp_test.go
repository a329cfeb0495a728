package k8s_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	npv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
	npclient "sigs.k8s.io/network-policy-api/pkg/client/clientset/versioned"
	"sigs.k8s.io/yaml"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// installCNPCRD applies deploy/crds' ClusterNetworkPolicy CRD (the
// network-policy-api release's experimental channel) and waits until
// v1beta1 is served.
func installCNPCRD(ctx context.Context, t *testing.T, dyn dynamic.Interface, np npclient.Interface) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", "policy.networking.k8s.io_clusternetworkpolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	if _, err := crds.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		if _, err := np.PolicyV1beta1().ClusterNetworkPolicies().List(ctx, metav1.ListOptions{}); err != nil {
			return err.Error()
		}
		return ""
	})
}

// TestClusterNetworkPolicyAgainstAPIServer runs routed-controllers
// against a real kube-apiserver (with the ClusterNetworkPolicy CRD) and
// a real etcd: Admin and Baseline ClusterNetworkPolicies become
// GlobalNetworkPolicies in kube-admin and kube-baseline with their
// priority as order and their rules' actions; a domainNames peer gets a
// Warning event and is left out of its Accept rule; a policy moved to
// the other tier leaves nothing in the old one; after a restart, what
// was deleted while it was down is removed and what changed converges;
// global policies written by hand, one even under a kcnp. name, are
// never touched.
func TestClusterNetworkPolicyAgainstAPIServer(t *testing.T) {
	srv := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1000000)
	store := dstest.Client(t)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	npc := npclient.NewForConfigOrDie(rc)
	installCNPCRD(ctx, t, dynamic.NewForConfigOrDie(rc), npc)
	cnps := npc.PolicyV1beta1().ClusterNetworkPolicies()

	start := func() func() {
		return startControllers(ctx, t, controllers.Config{Kube: kube, Store: store, NetworkPolicyAPI: npc, LeaseName: "cnp-" + suffix})
	}
	gnp := func(name string) *api.GlobalNetworkPolicy {
		r, err := store.Get(ctx, api.KindGlobalNetworkPolicy, name)
		if err != nil {
			return nil
		}
		return r.(*api.GlobalNetworkPolicy)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// Written by hand: a policy in kube-admin, and one squatting on the
	// name a ClusterNetworkPolicy below converts to.
	admin, baseline := "admin-"+suffix, "base-"+suffix
	squat := "squat-" + suffix
	for _, name := range []string{"by-hand-" + suffix, controllers.CNPName(npv1beta1.AdminTier, squat)} {
		order := 1.0
		_, err := store.Create(ctx, &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: name},
			Spec: api.GlobalNetworkPolicySpec{PolicySpec: api.PolicySpec{Tier: api.KubeAdminTierName, Order: &order, Selector: "all()",
				Ingress: []api.Rule{{Action: api.ActionDeny}}}}})
		must(err)
	}

	stop := start()
	sel := func(kv ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{kv[0]: kv[1]}}
	}
	_, err = cnps.Create(ctx, &npv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: admin},
		Spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 10,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: sel("team", "a")},
			Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Name: "deny-b", Action: npv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []npv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: sel("team", "b")}}}},
			Egress: []npv1beta1.ClusterNetworkPolicyEgressRule{{Action: npv1beta1.ClusterNetworkPolicyRuleActionAccept,
				To:        []npv1beta1.ClusterNetworkPolicyEgressPeer{{DomainNames: []npv1beta1.DomainName{"example.com"}}, {Networks: []npv1beta1.CIDR{"192.0.2.0/24"}}},
				Protocols: []npv1beta1.ClusterNetworkPolicyProtocol{{TCP: &npv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &npv1beta1.Port{Number: 443}}}}}}}},
		metav1.CreateOptions{})
	must(err)
	_, err = cnps.Create(ctx, &npv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: baseline},
		Spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.BaselineTier, Priority: 3,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Pods: &npv1beta1.NamespacedPod{PodSelector: *sel("app", "db")}},
			Ingress: []npv1beta1.ClusterNetworkPolicyIngressRule{{Action: npv1beta1.ClusterNetworkPolicyRuleActionPass,
				From: []npv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &npv1beta1.NamespacedPod{PodSelector: *sel("app", "web")}}}}}}},
		metav1.CreateOptions{})
	must(err)
	_, err = cnps.Create(ctx, &npv1beta1.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: squat},
		Spec: npv1beta1.ClusterNetworkPolicySpec{Tier: npv1beta1.AdminTier, Priority: 1,
			Subject: npv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}}}, metav1.CreateOptions{})
	must(err)

	const orch = "projectcalico.org/orchestrator == 'k8s'"
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		a := gnp(controllers.CNPName(npv1beta1.AdminTier, admin))
		if a == nil || a.Spec.Tier != api.KubeAdminTierName || a.Spec.Order == nil || *a.Spec.Order != 10 || a.Spec.NamespaceSelector != "team == 'a'" ||
			len(a.Spec.Ingress) != 1 || a.Spec.Ingress[0].Action != api.ActionDeny || a.Spec.Ingress[0].Source.NamespaceSelector != "team == 'b'" ||
			len(a.Spec.Egress) != 1 || a.Spec.Egress[0].Action != api.ActionAllow || fmt.Sprint(a.Spec.Egress[0].Destination.Nets) != "[192.0.2.0/24]" {
			return fmt.Sprintf("admin policy %+v", a)
		}
		b := gnp(controllers.CNPName(npv1beta1.BaselineTier, baseline))
		if b == nil || b.Spec.Tier != api.KubeBaselineTierName || *b.Spec.Order != 3 || b.Spec.Selector != orch+" && app == 'db'" ||
			len(b.Spec.Ingress) != 1 || b.Spec.Ingress[0].Action != api.ActionPass {
			return fmt.Sprintf("baseline policy %+v", b)
		}
		return ""
	})
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		evs, err := kube.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + admin})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == controllers.EventReasonNotExact && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Kind == "ClusterNetworkPolicy" {
				return ""
			}
		}
		return fmt.Sprintf("no %s event on %s (%d events)", controllers.EventReasonNotExact, admin, len(evs.Items))
	})

	// Moved to the other tier: written there, gone from the old one.
	cur, err := cnps.Get(ctx, baseline, metav1.GetOptions{})
	must(err)
	cur.Spec.Tier = npv1beta1.AdminTier
	_, err = cnps.Update(ctx, cur, metav1.UpdateOptions{})
	must(err)
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		if gnp(controllers.CNPName(npv1beta1.BaselineTier, baseline)) != nil {
			return "still in kube-baseline"
		}
		if p := gnp(controllers.CNPName(npv1beta1.AdminTier, baseline)); p == nil || p.Spec.Tier != api.KubeAdminTierName {
			return fmt.Sprintf("in kube-admin: %+v", p)
		}
		return ""
	})

	// Down: one deleted, one changed. Up again: both converge.
	stop()
	must(cnps.Delete(ctx, baseline, metav1.DeleteOptions{}))
	cur, err = cnps.Get(ctx, admin, metav1.GetOptions{})
	must(err)
	cur.Spec.Priority = 42
	_, err = cnps.Update(ctx, cur, metav1.UpdateOptions{})
	must(err)
	stop = start()
	defer stop()
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		if gnp(controllers.CNPName(npv1beta1.AdminTier, baseline)) != nil {
			return "the deleted policy's GlobalNetworkPolicy is still there"
		}
		if a := gnp(controllers.CNPName(npv1beta1.AdminTier, admin)); a == nil || *a.Spec.Order != 42 {
			return fmt.Sprintf("admin policy %+v", a)
		}
		return ""
	})
	must(cnps.Delete(ctx, squat, metav1.DeleteOptions{}))
	must(cnps.Delete(ctx, admin, metav1.DeleteOptions{}))
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		if gnp(controllers.CNPName(npv1beta1.AdminTier, admin)) != nil {
			return "the deleted admin policy's GlobalNetworkPolicy is still there"
		}
		return ""
	})
	for _, name := range []string{"by-hand-" + suffix, controllers.CNPName(npv1beta1.AdminTier, squat)} {
		if p := gnp(name); p == nil || controllers.IsOwned(p) || len(p.Spec.Ingress) != 1 || p.Spec.Ingress[0].Action != api.ActionDeny {
			t.Errorf("%s, written by hand: %+v", name, p)
		}
	}
}
