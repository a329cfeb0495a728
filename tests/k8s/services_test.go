package k8s_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// TestServiceEndpointsAgainstAPIServer runs routed-controllers against
// a real kube-apiserver and a real etcd: a Service named by a rule gets
// a ServiceEndpoints record equal to its EndpointSlices (written here
// as kube-controller-manager's endpointslice controller would: this
// tier runs no controller manager), which follows an endpoint added and
// a port changed; a Service no rule names gets none; the record goes
// with the rule, and with the Service's slices.
func TestServiceEndpointsAgainstAPIServer(t *testing.T) {
	srv := cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h := fnv.New32a()
	h.Write([]byte(t.Name()))
	ns := fmt.Sprintf("svc-%x-%d", h.Sum32(), time.Now().UnixNano()%100000)

	store := dstest.Client(t)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	port := func(name string, n int32) []discoveryv1.EndpointPort {
		return []discoveryv1.EndpointPort{{Name: &name, Port: &n}}
	}
	ready := true
	slice := func(svc, name string, ports []discoveryv1.EndpointPort, addrs ...string) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: ports}
		for _, a := range addrs {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
		}
		return es
	}
	slices := kube.DiscoveryV1().EndpointSlices(ns)
	for _, s := range []*discoveryv1.EndpointSlice{
		slice("web", "web-a", port("http", 8080), "10.9.0.1"),
		slice("other", "other-a", port("http", 8080), "10.9.1.1"),
	} {
		_, err := slices.Create(ctx, s, metav1.CreateOptions{})
		must(err)
	}
	pol := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "to-web", Namespace: ns}}
	pol.Spec.Egress = []api.Rule{{Action: api.ActionAllow, Destination: api.EntityRule{Services: &api.ServiceMatch{Name: "web"}}}}
	_, err = store.Create(ctx, pol)
	must(err)

	stop := startControllers(ctx, t, controllers.Config{Kube: kube, Store: store, LeaseName: ns})
	defer stop()
	record := func(name string) string {
		r, err := store.Get(ctx, api.KindServiceEndpoints, api.NamespacedName(api.KindServiceEndpoints, ns, name))
		if err != nil {
			return "none"
		}
		return fmt.Sprint(r.(*api.ServiceEndpoints).Spec.Subsets)
	}
	expect := func(why string, want map[string]string) {
		t.Helper()
		testenv.Eventually(t, 60*time.Second, 100*time.Millisecond, func() string {
			for name, w := range want {
				if got := record(name); got != w {
					return fmt.Sprintf("%s: %s: %s, want %s", why, name, got, w)
				}
			}
			return ""
		})
	}
	expect("start", map[string]string{"web": "[{[10.9.0.1] [{http TCP 8080}]}]", "other": "none"})

	es, err := slices.Get(ctx, "web-a", metav1.GetOptions{})
	must(err)
	es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.9.0.2"}})
	_, err = slices.Update(ctx, es, metav1.UpdateOptions{})
	must(err)
	expect("endpoint added", map[string]string{"web": "[{[10.9.0.1 10.9.0.2] [{http TCP 8080}]}]"})
	_, err = slices.Create(ctx, slice("web", "web-b", port("http", 9090), "10.9.0.3"), metav1.CreateOptions{})
	must(err)
	expect("a slice with another port", map[string]string{"web": "[{[10.9.0.1 10.9.0.2] [{http TCP 8080}]} {[10.9.0.3] [{http TCP 9090}]}]"})

	cur, err := store.Get(ctx, api.KindNetworkPolicy, api.StoreName(pol))
	must(err)
	must(store.Delete(ctx, api.KindNetworkPolicy, api.StoreName(pol), cur.Meta().ResourceVersion))
	expect("no rule names web", map[string]string{"web": "none"})

	pol.Metadata.ResourceVersion = ""
	_, err = store.Create(ctx, pol)
	must(err)
	expect("named again", map[string]string{"web": "[{[10.9.0.1 10.9.0.2] [{http TCP 8080}]} {[10.9.0.3] [{http TCP 9090}]}]"})
	must(slices.Delete(ctx, "web-a", metav1.DeleteOptions{}))
	must(slices.Delete(ctx, "web-b", metav1.DeleteOptions{}))
	expect("the Service's slices gone", map[string]string{"web": "none"})
}
