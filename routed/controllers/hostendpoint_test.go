package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
)

// TestAutoHostEndpoints drives Run with autoCreate on (client-go's fake
// clientset, a real etcd): every node gets "<node>-auto-hep" ("*", its
// labels and addresses, the allow-all profile, which is created too), a
// relabelled node's follows, a deleted node's goes, a hand-written one
// of the same name is left alone, and turned off, the controllers'
// endpoints go.
func TestAutoHostEndpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := dstest.Client(t)
	if _, err := store.Create(ctx, &api.HostEndpoint{Metadata: api.ObjectMeta{Name: "byhand" + AutoHostEndpointSuffix},
		Spec: api.HostEndpointSpec{Node: "byhand", InterfaceName: "eth0"}}); err != nil {
		t.Fatal(err)
	}
	node := func(name string, labels map[string]string, ip string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeHostName, Address: name}}}}
	}
	kube := fake.NewClientset(node("node1", map[string]string{"zone": "a"}, "10.0.0.1"), node("node2", nil, "10.0.0.2"), node("byhand", nil, "10.0.0.3"))
	start := func(on bool) func() {
		cctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(cctx, Config{Kube: kube, Store: store, Identity: "t", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second,
				RetryPeriod: 200 * time.Millisecond, AutoHostEndpoints: on})
		}()
		return func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	}
	hep := func(name string) *api.HostEndpoint {
		r, err := store.Get(ctx, api.KindHostEndpoint, name)
		if err != nil {
			return nil
		}
		return r.(*api.HostEndpoint)
	}
	stop := start(true)
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		h := hep("node1-auto-hep")
		if h == nil || h.Spec.Node != "node1" || h.Spec.InterfaceName != "*" || h.Metadata.Labels["zone"] != "a" ||
			!slices.Equal(h.Spec.ExpectedIPs, []string{"10.0.0.1"}) || !slices.Equal(h.Spec.Profiles, []string{api.DefaultAllowProfile}) {
			return fmt.Sprintf("node1's endpoint %+v", h)
		}
		if hep("node2-auto-hep") == nil {
			return "no node2-auto-hep"
		}
		p, err := store.Get(ctx, api.KindProfile, api.DefaultAllowProfile)
		if err != nil || len(p.(*api.Profile).Spec.Ingress) != 1 || p.(*api.Profile).Spec.Ingress[0].Action != api.ActionAllow {
			return fmt.Sprintf("profile %v %v", p, err)
		}
		if err := p.Validate(); err != nil {
			return err.Error()
		}
		return ""
	})
	if h := hep("byhand-auto-hep"); h == nil || IsOwned(h) || h.Spec.InterfaceName != "eth0" {
		t.Errorf("the hand-written endpoint was changed: %+v", h)
	}
	n1, _ := kube.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	n1.Labels["zone"] = "b"
	if _, err := kube.CoreV1().Nodes().Update(ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := kube.CoreV1().Nodes().Delete(ctx, "node2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if h := hep("node1-auto-hep"); h == nil || h.Metadata.Labels["zone"] != "b" {
			return fmt.Sprintf("node1's endpoint after the relabel %+v", h)
		}
		if hep("node2-auto-hep") != nil {
			return "node2-auto-hep outlived its node"
		}
		return ""
	})
	stop()

	stop = start(false)
	defer stop()
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if hep("node1-auto-hep") != nil {
			return "node1-auto-hep still there with autoCreate off"
		}
		return ""
	})
	if hep("byhand-auto-hep") == nil {
		t.Error("the hand-written endpoint was deleted")
	}
}

// TestAutoHostEndpointsAdoptCalicos: Calico's automatic host endpoints,
// carried unowned by routedctl migrate calico, fail closed in either
// order. Off, the controllers remove only what they wrote: Calico's stay
// as carried, policing their hosts. On, Calico's "<node>-auto-hep" of a
// node is taken over (rewritten as the controllers' own, marked
// adopted, labels and addresses from the node, which here only adds to
// them, Calico's created-by label kept), a deleted
// node's goes, and what is not Calico's default endpoint (one from a
// template, one written by hand under the same pattern) is left alone.
func TestAutoHostEndpointsAdoptCalicos(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := dstest.Client(t)
	calico := func(name, node, iface string, labels map[string]string, ips ...string) *api.HostEndpoint {
		l := map[string]string{CalicoCreatedByLabel: CalicoCreatedByValue}
		for k, v := range labels {
			l[k] = v
		}
		return &api.HostEndpoint{Metadata: api.ObjectMeta{Name: name, Labels: l},
			Spec: api.HostEndpointSpec{Node: node, InterfaceName: iface, ExpectedIPs: ips, Profiles: []string{api.DefaultAllowProfile}}}
	}
	written := AutoHostEndpoint(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "old"}})
	for _, h := range []*api.HostEndpoint{
		calico("node1-auto-hep", "node1", "*", map[string]string{"zone": "a"}, "10.0.0.1"),
		calico("gone-auto-hep", "gone", "*", nil, "10.0.0.9"),
		calico("node1-tmpl-auto-hep", "node1", "", nil, "10.0.0.1"),
		{Metadata: api.ObjectMeta{Name: "byhand-auto-hep"}, Spec: api.HostEndpointSpec{Node: "byhand", InterfaceName: "*"}},
		written,
	} {
		if _, err := store.Create(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: map[string]string{"zone": "a", "rack": "r1"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeExternalIP, Address: "192.0.2.1"}}}})
	hep := func(name string) *api.HostEndpoint {
		r, err := store.Get(ctx, api.KindHostEndpoint, name)
		if err != nil {
			return nil
		}
		return r.(*api.HostEndpoint)
	}
	run := func(on bool, done func() string) {
		t.Helper()
		cctx, stop := context.WithCancel(ctx)
		ended := make(chan error, 1)
		go func() {
			ended <- Run(cctx, Config{Kube: kube, Store: store, Identity: "t", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second,
				RetryPeriod: 200 * time.Millisecond, AutoHostEndpoints: on})
		}()
		testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, done)
		stop()
		if err := <-ended; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	run(false, func() string {
		if hep("old-auto-hep") != nil {
			return "the controllers' own endpoint still there with autoCreate off"
		}
		return ""
	})
	for _, name := range []string{"node1-auto-hep", "gone-auto-hep", "node1-tmpl-auto-hep", "byhand-auto-hep"} {
		if h := hep(name); h == nil || IsOwned(h) {
			t.Errorf("off: %s was removed or taken over: %+v", name, h)
		}
	}
	run(true, func() string {
		h := hep("node1-auto-hep")
		if h == nil || !IsOwned(h) || h.Metadata.Annotations[AdoptedAnnotation] != CalicoCreatedByValue || h.Metadata.Labels["rack"] != "r1" ||
			h.Metadata.Labels["zone"] != "a" || h.Metadata.Labels[CalicoCreatedByLabel] != CalicoCreatedByValue ||
			!slices.Equal(h.Spec.ExpectedIPs, []string{"10.0.0.1", "192.0.2.1"}) {
			return fmt.Sprintf("node1's endpoint not taken over: %+v", h)
		}
		if hep("gone-auto-hep") != nil {
			return "Calico's endpoint of a deleted node is still there"
		}
		return ""
	})
	if h := hep("node1-tmpl-auto-hep"); h == nil || IsOwned(h) || !slices.Equal(h.Spec.ExpectedIPs, []string{"10.0.0.1"}) {
		t.Errorf("on: Calico's template endpoint was changed: %+v", h)
	}
	if h := hep("byhand-auto-hep"); h == nil || IsOwned(h) {
		t.Errorf("on: the hand-written endpoint was changed: %+v", h)
	}
}
