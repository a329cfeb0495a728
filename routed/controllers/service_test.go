package controllers

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
)

func slice(ns, svc, name string, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4, Endpoints: eps, Ports: ports,
	}
}

func esPort(name string, proto corev1.Protocol, port int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Name: &name, Port: &port}
	if proto != "" {
		p.Protocol = &proto
	}
	return p
}

func endpoint(ready bool, addrs ...string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
}

// TestServiceEndpointsFor: slices with the same ports merge into one
// subset, others make their own; every listed endpoint counts, ready or
// not (Calico's); a port without a number and a non-IP address are
// left out, a protocol not given is TCP; addresses and ports come out
// sorted and distinct, so the same slices give the same record.
func TestServiceEndpointsFor(t *testing.T) {
	web := []discoveryv1.EndpointPort{esPort("http", "", 8080), esPort("dns", corev1.ProtocolUDP, 53)}
	unnumbered := discoveryv1.EndpointPort{Name: new(string)}
	r := ServiceEndpointsFor("shop", "web", []*discoveryv1.EndpointSlice{
		slice("shop", "web", "web-1", web, endpoint(true, "10.0.0.2"), endpoint(false, "10.0.0.1")),
		slice("shop", "web", "web-2", []discoveryv1.EndpointPort{web[1], web[0]}, endpoint(true, "10.0.0.2", "10.0.0.3")),
		slice("shop", "web", "web-v6", []discoveryv1.EndpointPort{esPort("sctp", corev1.ProtocolSCTP, 9), unnumbered}, endpoint(true, "fd00::1")),
		slice("shop", "web", "web-fqdn", web, endpoint(true, "db.example.com")),
		slice("shop", "web", "web-empty", []discoveryv1.EndpointPort{esPort("x", "", 1)}),
	})
	if !IsOwned(r) || r.Metadata.Annotations[SourceAnnotation] != "shop/web" || api.StoreName(r) != "shop.web" {
		t.Errorf("metadata %+v", r.Metadata)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []api.ServiceSubset{
		{Addresses: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, Ports: []api.ServicePort{
			{Name: "http", Protocol: api.Protocol{Name: "TCP"}, Port: 8080}, {Name: "dns", Protocol: api.Protocol{Name: "UDP"}, Port: 53}}},
		{Addresses: []string{"fd00::1"}, Ports: []api.ServicePort{{Name: "sctp", Protocol: api.Protocol{Name: "SCTP"}, Port: 9}}},
	}
	if got := r.Spec.Subsets; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("subsets\n got %+v\nwant %+v", got, want)
	}
}

// TestServicesNamed: the Services the rules of each kind name (the
// staged policies' too), a NetworkPolicy's defaulting to its
// namespace, each once.
func TestServicesNamed(t *testing.T) {
	rules := []api.Rule{
		{Action: api.ActionAllow, Source: api.EntityRule{Services: &api.ServiceMatch{Name: "a"}}},
		{Action: api.ActionAllow, Destination: api.EntityRule{Services: &api.ServiceMatch{Name: "b", Namespace: "other"}}},
		{Action: api.ActionDeny, Source: api.EntityRule{Services: &api.ServiceMatch{Name: "a"}}},
	}
	np := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "p", Namespace: "shop"}}
	np.Spec.Ingress, np.Spec.Egress = rules[:1], rules[1:]
	if got := ServicesNamed(np); !slices.Equal(got, []string{"shop/a", "other/b"}) {
		t.Errorf("NetworkPolicy names %v", got)
	}
	gnp := &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "g"}}
	gnp.Spec.Egress = rules
	if got := ServicesNamed(gnp); !slices.Equal(got, []string{"other/b"}) {
		t.Errorf("GlobalNetworkPolicy names %v (a match without namespace names nothing there)", got)
	}
	if got := ServicesNamed(&api.Profile{Spec: api.ProfileSpec{Ingress: rules[1:2]}}); !slices.Equal(got, []string{"other/b"}) {
		t.Errorf("Profile names %v", got)
	}
	snp := &api.StagedNetworkPolicy{Metadata: api.ObjectMeta{Name: "s", Namespace: "shop"}}
	snp.Spec.Ingress = rules[:1]
	if got := ServicesNamed(snp); !slices.Equal(got, []string{"shop/a"}) {
		t.Errorf("StagedNetworkPolicy names %v", got)
	}
	sgnp := &api.StagedGlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "s"}}
	sgnp.Spec.Egress = rules[1:2]
	if got := ServicesNamed(sgnp); !slices.Equal(got, []string{"other/b"}) {
		t.Errorf("StagedGlobalNetworkPolicy names %v", got)
	}
}

// TestServiceRecords drives Run with client-go's fake clientset for the
// API server and a real etcd: a Service a rule names gets its record
// and follows its EndpointSlices (an endpoint added, a port changed, a
// slice removed);
// a Service no rule names gets none; the record goes when the last
// rule naming it goes, comes back with a new rule, goes when its last
// slice moves to another Service and with the Service's slices; a record left by an earlier run for a Service no
// rule names is removed at start.
func TestServiceRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := dstest.Client(t)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}
	stale := ServiceEndpointsFor("shop", "gone", []*discoveryv1.EndpointSlice{slice("shop", "gone", "g", []discoveryv1.EndpointPort{esPort("", "", 80)}, endpoint(true, "10.0.9.9"))})
	if _, err := store.Create(ctx, stale); err != nil {
		t.Fatal(err)
	}
	pol := &api.NetworkPolicy{Metadata: api.ObjectMeta{Name: "to-web", Namespace: "shop"}}
	pol.Spec.Egress = []api.Rule{{Action: api.ActionAllow, Destination: api.EntityRule{Services: &api.ServiceMatch{Name: "web"}}}}
	if _, err := store.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	http := []discoveryv1.EndpointPort{esPort("http", "", 8080)}
	kube := fake.NewClientset(
		slice("shop", "web", "web-1", http, endpoint(true, "10.0.0.1")),
		slice("shop", "web", "web-2", http, endpoint(true, "10.0.0.2")),
		slice("shop", "other", "other-1", http, endpoint(true, "10.0.1.1")),
	)
	cctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(cctx, Config{Kube: kube, Store: store, Identity: "t", LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 200 * time.Millisecond})
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	addrs := func(name string) string {
		r, err := store.Get(ctx, api.KindServiceEndpoints, "shop."+name)
		if err != nil {
			return "none"
		}
		var out []string
		for _, s := range r.(*api.ServiceEndpoints).Spec.Subsets {
			out = append(out, s.Addresses...)
		}
		return fmt.Sprint(out)
	}
	expect := func(why string, want map[string]string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() string {
			for name, w := range want {
				if got := addrs(name); got != w {
					return fmt.Sprintf("%s: record %s: %s, want %s", why, name, got, w)
				}
			}
			return ""
		})
	}
	expect("start", map[string]string{"web": "[10.0.0.1 10.0.0.2]", "other": "none", "gone": "none"})

	es := kube.DiscoveryV1().EndpointSlices("shop")
	if _, err := es.Update(ctx, slice("shop", "web", "web-1", http, endpoint(true, "10.0.0.1"), endpoint(false, "10.0.0.3")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("endpoint added", map[string]string{"web": "[10.0.0.1 10.0.0.2 10.0.0.3]"})

	// A slice's port changes (a named targetPort resolving to another
	// number on its pods): the record's ports follow, per slice.
	if _, err := es.Update(ctx, slice("shop", "web", "web-2", []discoveryv1.EndpointPort{esPort("http", "", 9090)}, endpoint(true, "10.0.0.2")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() string {
		r, err := store.Get(ctx, api.KindServiceEndpoints, "shop.web")
		if err != nil {
			return err.Error()
		}
		var got []string
		for _, sub := range r.(*api.ServiceEndpoints).Spec.Subsets {
			for _, p := range sub.Ports {
				got = append(got, fmt.Sprintf("%v:%s/%d", sub.Addresses, p.Protocol.Name, p.Port))
			}
		}
		if w := "[[10.0.0.1 10.0.0.3]:TCP/8080 [10.0.0.2]:TCP/9090]"; fmt.Sprint(got) != w {
			return fmt.Sprintf("port changed: record web %v, want %s", got, w)
		}
		return ""
	})
	if err := es.Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("slice removed", map[string]string{"web": "[10.0.0.1 10.0.0.3]"})

	cur, err := store.Get(ctx, api.KindNetworkPolicy, "shop.to-web")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, api.KindNetworkPolicy, "shop.to-web", cur.Meta().ResourceVersion); err != nil {
		t.Fatal(err)
	}
	expect("no rule names web", map[string]string{"web": "none"})

	gnp := &api.GlobalNetworkPolicy{Metadata: api.ObjectMeta{Name: "from-web"}}
	gnp.Spec.Ingress = []api.Rule{{Action: api.ActionDeny, Source: api.EntityRule{Services: &api.ServiceMatch{Name: "web", Namespace: "shop"}}}}
	if _, err := store.Create(ctx, gnp); err != nil {
		t.Fatal(err)
	}
	expect("named again", map[string]string{"web": "[10.0.0.1 10.0.0.3]", "other": "none"})

	// The last slice moves to another Service (relabelled): web has
	// none left.
	if _, err := es.Update(ctx, slice("shop", "other", "web-1", http, endpoint(true, "10.0.0.1")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("slice moved away", map[string]string{"web": "none", "other": "none"})
	if _, err := es.Update(ctx, slice("shop", "web", "web-1", http, endpoint(true, "10.0.0.4")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("slice back", map[string]string{"web": "[10.0.0.4]"})
	if err := es.Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("Service gone", map[string]string{"web": "none"})
}
