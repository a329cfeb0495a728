package migrate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/routed-net/routed/pkg/api"
)

// TestPolicyKeepsItsGivenName: a policy libcalico-go v3.30+ stored under
// its tier's prefix comes over under the name Calico shows it by (the
// one in projectcalico.org/metadata), from etcd and from a custom
// resource; one stored without that annotation (Calico 3.28, 3.29)
// keeps its stored name; a non-JSON annotation is an error naming it.
func TestPolicyKeepsItsGivenName(t *testing.T) {
	etcd := func(k api.Kind, key, value string) (api.Resource, error) {
		r, _, err := decodeCalico(k, kv{Key: []byte(calicoResources + key), Value: []byte(value)})
		return r, err
	}
	r, err := etcd(api.KindGlobalNetworkPolicy, "globalnetworkpolicies/default.deny-9001", `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3",
	 "metadata":{"name":"default.deny-9001","annotations":{"projectcalico.org/metadata":"{\"name\":\"deny-9001\",\"creationTimestamp\":null}"}},
	 "spec":{"order":100,"selector":"all()","types":["Ingress"],"ingress":[{"action":"Deny","protocol":"TCP","destination":{"ports":[9001]}}]}}`)
	if err != nil || r.Meta().Name != "deny-9001" || len(r.Meta().Annotations) != 0 {
		t.Errorf("etcd GlobalNetworkPolicy: %v %+v", err, r)
	}
	r, err = etcd(api.KindNetworkPolicy, "networkpolicies/shop/security.allow-web", `{"kind":"NetworkPolicy","apiVersion":"projectcalico.org/v3",
	 "metadata":{"name":"security.allow-web","namespace":"shop","annotations":{"projectcalico.org/metadata":"{\"name\":\"security.allow-web\"}"}},
	 "spec":{"tier":"security","selector":"app == 'web'","types":["Ingress"],"ingress":[{"action":"Allow"}]}}`)
	if err != nil || r.Meta().Name != "security.allow-web" || r.Meta().Namespace != "shop" {
		t.Errorf("etcd NetworkPolicy in tier security: %v %+v", err, r)
	}
	r, err = etcd(api.KindStagedNetworkPolicy, "stagednetworkpolicies/shop/default.try", `{"kind":"StagedNetworkPolicy","apiVersion":"projectcalico.org/v3",
	 "metadata":{"name":"default.try","namespace":"shop"},"spec":{"tier":"default"}}`)
	if err != nil || r.Meta().Name != "default.try" {
		t.Errorf("etcd StagedNetworkPolicy without the annotation: %v %+v", err, r)
	}
	_, err = etcd(api.KindGlobalNetworkPolicy, "globalnetworkpolicies/default.bad", `{"kind":"GlobalNetworkPolicy","apiVersion":"projectcalico.org/v3",
	 "metadata":{"name":"default.bad","annotations":{"projectcalico.org/metadata":"{name"}},"spec":{"selector":"all()"}}`)
	if err == nil || !strings.Contains(err.Error(), "globalnetworkpolicies/default.bad") || !strings.Contains(err.Error(), calicoMetadataAnnotation) {
		t.Errorf("a non-JSON annotation: %v", err)
	}

	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": "default.db-only", "namespace": "shop",
			"annotations": map[string]any{"projectcalico.org/metadata": `{"name":"db-only","labels":{"team":"db"}}`}},
		"spec": map[string]any{"selector": "app == 'db'", "types": []any{"Ingress"}, "ingress": []any{map[string]any{"action": "Deny"}}},
	}}
	r, _, err = decodeCalicoObject(api.KindNetworkPolicy, calicoObject(u), "test")
	if err != nil || r.Meta().Name != "db-only" || r.Meta().Labels["team"] != "db" {
		t.Errorf("custom resource NetworkPolicy: %v %+v", err, r)
	}
	u.Object["kind"], u.Object["spec"] = "IPPool", map[string]any{"cidr": "10.9.0.0/16", "blockSize": int64(26), "nodeSelector": "all()"}
	u.SetNamespace("")
	if obj := calicoObject(u); obj["metadata"].(map[string]any)["name"] != "default.db-only" {
		t.Errorf("a kind stored without a tier prefix was renamed: %v", obj["metadata"])
	}
}
