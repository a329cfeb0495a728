package datastore

import (
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestPolicyKindsStored: the policy model's kinds live at
// /routed/v1/<plural>/<name>, namespaced ones under
// "<namespace>.<name>", so two namespaces may hold the same name; Get,
// List, Delete and the syncer all use that store name.
func TestPolicyKindsStored(t *testing.T) {
	t.Parallel()
	c, _ := newTestClient(t)
	ctx := testCtx(t)
	if err := c.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}

	order := 5.0
	np := func(ns string) *api.NetworkPolicy {
		p := &api.NetworkPolicy{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNetworkPolicy},
			Metadata: api.ObjectMeta{Name: "allow-web", Namespace: ns}}
		p.Spec.Order = &order
		p.Spec.Selector = "app == 'web'"
		p.Spec.Ingress = []api.Rule{{Action: api.ActionAllow, Protocol: &api.Protocol{Name: "TCP"},
			Destination: api.EntityRule{Ports: []api.Port{api.SinglePort(80), api.NamedPort("http")}}}}
		return p
	}
	objs := []api.Resource{np("shop"), np("blog"),
		&api.GlobalNetworkPolicy{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkPolicy}, Metadata: api.ObjectMeta{Name: "deny-all"}},
		&api.NetworkSet{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindNetworkSet}, Metadata: api.ObjectMeta{Name: "partners", Namespace: "shop"}, Spec: api.NetworkSetSpec{Nets: []string{"192.0.2.0/24"}}},
		&api.GlobalNetworkSet{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindGlobalNetworkSet}, Metadata: api.ObjectMeta{Name: "blocked"}, Spec: api.NetworkSetSpec{Nets: []string{"198.51.100.0/24"}}},
		&api.Profile{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindProfile}, Metadata: api.ObjectMeta{Name: "kns.shop"}, Spec: api.ProfileSpec{Ingress: []api.Rule{{Action: api.ActionAllow}}}},
	}
	for _, r := range objs {
		if _, err := c.Create(ctx, r); err != nil {
			t.Fatalf("Create %s %s: %v", r.GetKind(), api.StoreName(r), err)
		}
	}
	for _, key := range []string{"/routed/v1/networkpolicies/shop.allow-web", "/routed/v1/networkpolicies/blog.allow-web",
		"/routed/v1/globalnetworkpolicies/deny-all", "/routed/v1/networksets/shop.partners",
		"/routed/v1/globalnetworksets/blocked", "/routed/v1/profiles/kns.shop", "/routed/v1/tiers/kube-admin"} {
		resp, err := c.Etcd().Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Errorf("no record at %s: %v", key, err)
		}
	}

	got, err := c.Get(ctx, api.KindNetworkPolicy, "shop.allow-web")
	if err != nil {
		t.Fatal(err)
	}
	p := got.(*api.NetworkPolicy)
	if p.Metadata.Namespace != "shop" || p.Spec.Tier != "default" || *p.Spec.Order != 5 || p.Spec.Ingress[0].Destination.Ports[1].PortName != "http" {
		t.Errorf("read back %+v", p)
	}
	list, _, err := c.List(ctx, api.KindNetworkPolicy)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %d, %v", len(list), err)
	}
	// Apply finds the existing object by its store name.
	upd := np("shop")
	upd.Spec.Selector = "app == 'shop'"
	if _, err := c.Apply(ctx, upd); err != nil {
		t.Fatalf("Apply over an existing policy: %v", err)
	}

	// The node feed's stream names namespaced objects by store name too.
	r := newStreamRecorder()
	startStream(t, c, KindPrefix(api.KindNetworkPolicy), r, "")
	r.waitFor(t, "the list", func() bool { return len(r.state) == 2 })
	for key := range r.state {
		if k, name, ok := ParseKey(key); !ok || k != api.KindNetworkPolicy || !strings.Contains(name, ".allow-web") {
			t.Errorf("ParseKey(%q) = %v %q %v", key, k, name, ok)
		}
	}
	if err := c.Delete(ctx, api.KindNetworkPolicy, "blog.allow-web", ""); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the delete", func() bool { return len(r.state) == 1 })
	if _, ok := r.state[Key(api.KindNetworkPolicy, "blog.allow-web")]; ok {
		t.Error("the deleted policy is still in the stream's state")
	}
}
