package migrate

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynfake "k8s.io/client-go/dynamic/fake"
	kfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// fakeCluster is an API server, faked around kubeSource's clients,
// serving Calico's resources in gv (IPPools, IPAMBlocks and the plurals
// of objs' kinds), the extra group versions, the Calico and
// admin network policy objects objs and the Kubernetes objects kube.
type fakeCluster struct {
	gv    schema.GroupVersion
	extra []*metav1.APIResourceList
	objs  []*unstructured.Unstructured
	kube  []runtime.Object
}

func (c fakeCluster) source() (*kubeSource, *dynfake.FakeDynamicClient, *kfake.Clientset) {
	kinds := map[schema.GroupVersionResource]string{
		c.gv.WithResource("ippools"): "IPPoolList", c.gv.WithResource("ipamblocks"): "IPAMBlockList",
		anpV1alpha1.WithResource("adminnetworkpolicies"):         "AdminNetworkPolicyList",
		anpV1alpha1.WithResource("baselineadminnetworkpolicies"): "BaselineAdminNetworkPolicyList",
	}
	calico := &metav1.APIResourceList{GroupVersion: c.gv.String(), APIResources: []metav1.APIResource{{Name: "ippools"}, {Name: "ipamblocks"}}}
	var objs []runtime.Object
	for _, o := range c.objs {
		objs = append(objs, o)
		if o.GroupVersionKind().GroupVersion() == c.gv {
			plural, _ := meta.UnsafeGuessKindToResource(o.GroupVersionKind())
			plural.Resource = strings.ToLower(plural.Resource)
			if _, ok := kinds[plural]; !ok {
				kinds[plural] = o.GetKind() + "List"
				calico.APIResources = append(calico.APIResources, metav1.APIResource{Name: plural.Resource})
			}
		}
	}
	dyn := dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds, objs...)
	cs := kfake.NewSimpleClientset(c.kube...)
	cs.Discovery().(*fakediscovery.FakeDiscovery).Resources = append([]*metav1.APIResourceList{calico}, c.extra...)
	return &kubeSource{dyn: dyn, kube: cs}, dyn, cs
}

func object(gv schema.GroupVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(gv.String())
	u.SetKind(kind)
	u.SetName(name)
	return u
}

var (
	servesANP = &metav1.APIResourceList{GroupVersion: anpV1alpha1.String(),
		APIResources: []metav1.APIResource{{Name: "adminnetworkpolicies"}, {Name: "baselineadminnetworkpolicies"}}}
	servesCNP = &metav1.APIResourceList{GroupVersion: cnpV1beta1.String(), APIResources: []metav1.APIResource{{Name: "clusternetworkpolicies"}}}
)

func denyRule(dir string) map[string]any {
	return map[string]any{"subject": map[string]any{"namespaces": map[string]any{}},
		dir: []any{map[string]any{"name": "no-db", "action": "Deny", "to": []any{map[string]any{"namespaces": map[string]any{}}}}}}
}

func lossNames(ls []PolicyLoss) map[string]PolicyLoss {
	m := map[string]PolicyLoss{}
	for _, l := range ls {
		m[l.Kind+" "+l.Name] = l
	}
	return m
}

// TestKubeSourceAdminNetworkPolicies: Calico enforces v1alpha1
// AdminNetworkPolicies and BaselineAdminNetworkPolicies and routed's
// controllers do not watch them, so each is a policy loss naming the
// Deny rules it had, whichever group holds Calico's resources (with
// crd.projectcalico.org/v1 Calico keeps no copy of them at all).
// Calico's conversion of one (kanp./kbanp., served by its API server in
// projectcalico.org/v3) is the same loss, listed once under the
// original; one whose original is not listed is a loss of its own. The
// conversions of a NetworkPolicy and of a v1beta1 ClusterNetworkPolicy
// are only listed, as routed's controllers convert their originals;
// a kcnp. conversion while v1beta1 is not served is a loss.
func TestKubeSourceAdminNetworkPolicies(t *testing.T) {
	anp := object(anpV1alpha1, "AdminNetworkPolicy", "deny-db", denyRule("egress"))
	banp := object(anpV1alpha1, "BaselineAdminNetworkPolicy", "default", denyRule("ingress"))
	gnp := func(name string) *unstructured.Unstructured {
		return object(calicoCRDv3, "GlobalNetworkPolicy", name, map[string]any{"selector": "all()",
			"egress": []any{map[string]any{"action": "Deny"}}, "types": []any{"Egress"}})
	}
	for _, tc := range []struct {
		name  string
		c     fakeCluster
		loss  []string
		notes []string
	}{
		{"crd v1", fakeCluster{gv: calicoCRDv1, extra: []*metav1.APIResourceList{servesANP}, objs: []*unstructured.Unstructured{anp, banp}},
			[]string{"AdminNetworkPolicy deny-db", "BaselineAdminNetworkPolicy default"}, nil},
		{"v3", fakeCluster{gv: calicoCRDv3, extra: []*metav1.APIResourceList{servesANP, servesCNP}, objs: []*unstructured.Unstructured{anp, banp,
			gnp("kanp.adminnetworkpolicy.deny-db"), gnp("kbanp.baselineadminnetworkpolicy.default"), gnp("kanp.adminnetworkpolicy.gone"),
			gnp("knp.default.shop.web"), gnp("kcnp.kube-admin.deny")}},
			[]string{"AdminNetworkPolicy deny-db", "BaselineAdminNetworkPolicy default", "GlobalNetworkPolicy kanp.adminnetworkpolicy.gone"},
			[]string{"knp.default.shop.web", "kcnp.kube-admin.deny"}},
		{"v3 without v1beta1", fakeCluster{gv: calicoCRDv3, objs: []*unstructured.Unstructured{gnp("kcnp.kube-admin.deny")}},
			[]string{"GlobalNetworkPolicy kcnp.kube-admin.deny"}, nil},
		{"no v1alpha1", fakeCluster{gv: calicoCRDv1}, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _, _ := tc.c.source()
			st, err := src.read(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := lossNames(st.losses)
			for _, name := range tc.loss {
				l, ok := got[name]
				if !ok {
					t.Errorf("%s is not a loss: %v", name, st.losses)
					continue
				}
				if !strings.Contains(l.Consequence, "Deny rule(s) denied would be allowed") || !strings.Contains(l.Reason, "v1beta1") {
					t.Errorf("%s: reason or consequence: %s", name, l)
				}
				if strings.Contains(l.Reason, "convert the") && !strings.HasPrefix(name, "GlobalNetworkPolicy kcnp") {
					t.Errorf("%s: the reason claims routed converts it: %s", name, l.Reason)
				}
			}
			if len(got) != len(tc.loss) {
				t.Errorf("losses %v, want %v", st.losses, tc.loss)
			}
			for _, n := range tc.notes {
				found := false
				for _, s := range st.skipped {
					found = found || strings.Contains(s, n) && strings.Contains(s, "routed's controllers convert the")
				}
				if !found {
					t.Errorf("%s not listed as converted by routed's controllers: %q", n, st.skipped)
				}
			}
		})
	}
}

// TestKubeSourceAdminNetworkPoliciesUnreadable: AdminNetworkPolicies
// the API server serves but will not list (RBAC) refuse the read: an
// enforced policy is never passed over unseen.
func TestKubeSourceAdminNetworkPoliciesUnreadable(t *testing.T) {
	src, dyn, _ := fakeCluster{gv: calicoCRDv1, extra: []*metav1.APIResourceList{servesANP}}.source()
	dyn.PrependReactor("list", "adminnetworkpolicies", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: anpV1alpha1.Group, Resource: "adminnetworkpolicies"}, "", nil)
	})
	_, err := src.read(context.Background())
	if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "adminnetworkpolicies") {
		t.Fatalf("%v, want a Forbidden error naming adminnetworkpolicies", err)
	}
}
