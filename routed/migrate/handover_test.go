package migrate

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/controllers"
)

// TestEtcdHandsKubeDerivedToControllers: from Calico's etcd, the
// profiles and policies calico-kube-controllers derive from Kubernetes
// objects come over as routed-controllers' own, naming their source as
// routed-controllers do (so they update and delete them); what a user
// wrote does not.
func TestEtcdHandsKubeDerivedToControllers(t *testing.T) {
	for _, c := range []struct {
		kind     api.Kind
		key, doc string
		source   string // "": not handed over
	}{
		{api.KindProfile, "profiles/kns.shop", `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"kns.shop"},
		 "spec":{"ingress":[{"action":"Allow"}],"egress":[{"action":"Allow"}],"labelsToApply":{"pcns.projectcalico.org/name":"shop"}}}`, "shop"},
		{api.KindProfile, "profiles/ksa.shop.web.front", `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"ksa.shop.web.front"},
		 "spec":{"labelsToApply":{"pcsa.projectcalico.org/name":"web.front"}}}`, "shop/web.front"},
		{api.KindNetworkPolicy, "networkpolicies/shop/knp.default.db-only", `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3",
		 "metadata":{"name":"knp.default.db-only","namespace":"shop","annotations":{"projectcalico.org/metadata":"{\"name\":\"knp.default.db-only\"}"}},
		 "spec":{"tier":"default","order":1000,"selector":"projectcalico.org/orchestrator == 'k8s' && app == 'db'","types":["Ingress"]}}`, "shop/db-only"},
		{api.KindProfile, "profiles/edge", `{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":"edge"},"spec":{}}`, ""},
		{api.KindNetworkPolicy, "networkpolicies/shop/default.allow-web", `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3",
		 "metadata":{"name":"default.allow-web","namespace":"shop"},"spec":{"tier":"default","selector":"all()","types":["Ingress"]}}`, ""},
	} {
		r, _, err := decodeCalico(c.kind, kv{Key: []byte(calicoResources + c.key), Value: []byte(c.doc)})
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		handOver(r)
		a := r.Meta().Annotations
		switch {
		case c.source == "" && (controllers.IsOwned(r) || a[controllers.SourceAnnotation] != ""):
			t.Errorf("%s: a user's resource handed to routed-controllers: %v", c.key, a)
		case c.source != "" && (!controllers.IsOwned(r) || a[controllers.SourceAnnotation] != c.source):
			t.Errorf("%s: annotations %v, want routed-controllers' with source %q", c.key, a, c.source)
		}
	}
}
