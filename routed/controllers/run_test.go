package controllers

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
)

// TestRunResync drives Run with client-go's fake clientset standing in
// for the API server (tests/k8s runs the same against a real one) and a
// real etcd: objects become profiles, policies and endpoint labels;
// after a restart what was deleted while down is removed, and a policy
// written by hand stays.
func TestRunResync(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := dstest.Client(t)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}
	order := 5.0
	if _, err := store.Create(ctx, &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "by-hand", Namespace: "ns1"},
		Spec: api.NetworkPolicySpec{PolicySpec: api.PolicySpec{Order: &order}}}); err != nil {
		t.Fatal(err)
	}
	wepName := api.WorkloadEndpointName("node1", "k8s", "ns1", "web", "", "eth0")
	if _, err := store.Create(ctx, &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: wepName},
		Spec: api.WorkloadEndpointSpec{Node: "node1", Orchestrator: "k8s", Namespace: "ns1", Pod: "web", ContainerID: "c1",
			InterfaceName: "cali12345678901", IPNetworks: []string{"10.9.0.5/32"}}}); err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns1", Labels: map[string]string{"team": "a"}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "sa1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "web", Labels: map[string]string{"app": "web"}}, Spec: corev1.PodSpec{ServiceAccountName: "sa1"}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "deny"}},
	)
	start := func() func() {
		cctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(cctx, Config{Kube: kube, Store: store, Identity: "t", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond})
		}()
		return func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	has := func(k api.Kind, name string) api.Resource {
		r, err := store.Get(ctx, k, name)
		if err != nil {
			return nil
		}
		return r
	}
	stop := start()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if p, _ := has(api.KindProfile, "kns.ns1").(*api.Profile); p == nil || p.Spec.LabelsToApply["pcns.team"] != "a" {
			return fmt.Sprintf("kns.ns1 %+v", p)
		}
		if has(api.KindProfile, "ksa.ns1.sa1") == nil {
			return "no ksa.ns1.sa1"
		}
		if has(api.KindNetworkPolicy, "ns1.knp.default.deny") == nil {
			return "no ns1.knp.default.deny"
		}
		if w, _ := has(api.KindWorkloadEndpoint, wepName).(*api.WorkloadEndpoint); w == nil || w.Metadata.Labels["app"] != "web" || len(w.Spec.Profiles) != 2 {
			return fmt.Sprintf("endpoint %+v", w)
		}
		return ""
	})
	stop()
	if err := kube.NetworkingV1().NetworkPolicies("ns1").Delete(ctx, "deny", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().ServiceAccounts("ns1").Delete(ctx, "sa1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stop = start()
	defer stop()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if has(api.KindNetworkPolicy, "ns1.knp.default.deny") != nil {
			return "ns1.knp.default.deny still there"
		}
		if has(api.KindProfile, "ksa.ns1.sa1") != nil {
			return "ksa.ns1.sa1 still there"
		}
		return ""
	})
	if p := has(api.KindNetworkPolicy, "ns1.by-hand"); p == nil || IsOwned(p) {
		t.Errorf("the hand-written policy: %+v", p)
	}
}
