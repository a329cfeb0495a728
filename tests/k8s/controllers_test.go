package k8s_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// TestControllersAgainstAPIServer runs routed-controllers against a
// real kube-apiserver and a real etcd: a namespace, a service account, a
// pod and NetworkPolicies become profiles, endpoint labels and policies
// in etcd; a policy the model cannot hold gets a Warning event; after a
// restart, what was deleted while it was down is removed and what
// changed converges, and a policy written by hand is never touched.
func TestControllersAgainstAPIServer(t *testing.T) {
	srv := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	suffix := fmt.Sprintf("%x-%d", h.Sum32(), time.Now().UnixNano()%100000)
	ns := "ctl-" + suffix

	store := dstest.Client(t)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)

	start := func() func() {
		return startControllers(ctx, t, controllers.Config{Kube: kube, Store: store, LeaseName: "ctl-" + suffix})
	}
	get := func(k api.Kind, name string) api.Resource {
		r, err := store.Get(ctx, k, name)
		if err != nil {
			return nil
		}
		return r
	}

	// A policy an operator wrote in the namespace: never touched.
	order := 5.0
	userPol := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "by-hand", Namespace: ns},
		Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{Order: &order, Selector: "all()"}}}
	if _, err := store.Create(ctx, userPol); err != nil {
		t.Fatal(err)
	}
	// The pod's endpoint as an older CNI ADD wrote it.
	wepName := api.WorkloadEndpointName("node1", "k8s", ns, "web", "", "eth0")
	if _, err := store.Create(ctx, &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: wepName, Labels: map[string]string{"app": "stale"}},
		Spec: api.WorkloadEndpointSpec{Node: "node1", Orchestrator: "k8s", Namespace: ns, Pod: "web", ContainerID: "c1",
			InterfaceName: "cali12345678901", IPNetworks: []string{"10.9.0.5/32"}}}); err != nil {
		t.Fatal(err)
	}

	stop := start()
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"team": "a"}}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sa1", Labels: map[string]string{"role": "web"}}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{ServiceAccountName: "sa1", Containers: []corev1.Container{{Name: "c", Image: "none",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}, metav1.CreateOptions{})
	mustCreate(err)
	tcp := corev1.ProtocolTCP
	p80 := intstr.FromInt32(80)
	_, err = kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-web"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &p80}},
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}}}}}}}, metav1.CreateOptions{})
	mustCreate(err)
	var except []string
	for i := 0; i < 300; i++ {
		except = append(except, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	_, err = kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "too-wide"},
		Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: except}}}}}}}, metav1.CreateOptions{})
	mustCreate(err)

	pol := func(name string) *api.NetworkPolicy {
		r, _ := get(api.KindNetworkPolicy, api.NamespacedName(api.KindNetworkPolicy, ns, name)).(*api.NetworkPolicy)
		return r
	}
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		nsp, _ := get(api.KindProfile, "kns."+ns).(*api.Profile)
		if nsp == nil || nsp.Spec.LabelsToApply["pcns.team"] != "a" {
			return fmt.Sprintf("namespace profile %+v", nsp)
		}
		sap, _ := get(api.KindProfile, "ksa."+ns+".sa1").(*api.Profile)
		if sap == nil || sap.Spec.LabelsToApply["pcsa.role"] != "web" {
			return fmt.Sprintf("service account profile %+v", sap)
		}
		p := pol("knp.default.allow-web")
		if p == nil || len(p.Spec.Ingress) != 1 || p.Spec.Ingress[0].Source.NamespaceSelector != "team == 'a'" {
			return fmt.Sprintf("policy %+v", p)
		}
		if p := pol("knp.default.too-wide"); p == nil || len(p.Spec.Ingress) != 0 {
			return fmt.Sprintf("too-wide policy %+v: want it with its unexpressible rule left out", p)
		}
		w, _ := get(api.KindWorkloadEndpoint, wepName).(*api.WorkloadEndpoint)
		if w == nil || w.Metadata.Labels["app"] != "web" || w.Metadata.Labels[api.LabelServiceAccount] != "sa1" ||
			fmt.Sprint(w.Spec.Profiles) != fmt.Sprintf("[kns.%s ksa.%s.sa1]", ns, ns) || len(w.Spec.Ports) != 1 {
			return fmt.Sprintf("endpoint %+v", w)
		}
		return ""
	})
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		evs, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=too-wide"})
		if err != nil {
			return err.Error()
		}
		for _, e := range evs.Items {
			if e.Reason == controllers.EventReasonNotExact && e.Type == corev1.EventTypeWarning {
				return ""
			}
		}
		return fmt.Sprintf("no %s event on too-wide (%d events)", controllers.EventReasonNotExact, len(evs.Items))
	})

	// A label change reaches the endpoint.
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, "web", metav1.GetOptions{})
	mustCreate(err)
	pod.Labels["app"] = "web2"
	_, err = kube.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{})
	mustCreate(err)
	testenv.Eventually(t, 30*time.Second, 200*time.Millisecond, func() string {
		if w, _ := get(api.KindWorkloadEndpoint, wepName).(*api.WorkloadEndpoint); w == nil || w.Metadata.Labels["app"] != "web2" {
			return fmt.Sprintf("endpoint %+v", w)
		}
		return ""
	})

	// Down: a policy and the service account deleted, a namespace label
	// changed. Up again: everything converges.
	stop()
	mustCreate(kube.NetworkingV1().NetworkPolicies(ns).Delete(ctx, "allow-web", metav1.DeleteOptions{}))
	mustCreate(kube.CoreV1().ServiceAccounts(ns).Delete(ctx, "sa1", metav1.DeleteOptions{}))
	nso, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	mustCreate(err)
	nso.Labels["team"] = "b"
	_, err = kube.CoreV1().Namespaces().Update(ctx, nso, metav1.UpdateOptions{})
	mustCreate(err)
	stop = start()
	defer stop()
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() string {
		if p := pol("knp.default.allow-web"); p != nil {
			return "the deleted policy's knp.default.allow-web is still there"
		}
		if get(api.KindProfile, "ksa."+ns+".sa1") != nil {
			return "the deleted service account's profile is still there"
		}
		if nsp, _ := get(api.KindProfile, "kns."+ns).(*api.Profile); nsp == nil || nsp.Spec.LabelsToApply["pcns.team"] != "b" {
			return fmt.Sprintf("namespace profile %+v", nsp)
		}
		return ""
	})
	if p := pol("by-hand"); p == nil || controllers.IsOwned(p) {
		t.Errorf("the policy written by hand: %+v", p)
	}
}

// startControllers runs controllers.Run with cfg (fast leader election,
// identity "test") until the returned stop is called, which reports
// what Run returned.
func startControllers(ctx context.Context, t testing.TB, cfg controllers.Config) (stop func()) {
	cctx, cancel := context.WithCancel(ctx)
	cfg.Identity = "test"
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 4*time.Second, 3*time.Second, 500*time.Millisecond
	done := make(chan error, 1)
	go func() { done <- controllers.Run(cctx, cfg) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controllers.Run: %v", err)
		}
	}
}
