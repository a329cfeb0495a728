package migrate

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/routed-net/routed/pkg/api"
)

// TestKubeSourcePolicyLoss: Calico's custom resources (the Kubernetes
// datastore) go through the same classification as etcd's: a policy
// with an Allow rule matching HTTP is narrowed under the name Calico
// shows; a Pass rule matching HTTP and a host endpoint routed refuses
// are policy losses named as routedctl names them; a custom resource
// kind routed does not know is a loss, a bookkeeping kind a notice.
func TestKubeSourcePolicyLoss(t *testing.T) {
	cr := func(kind, ns, name string, ann map[string]string, spec map[string]any) map[string]any {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": kind, "spec": spec}}
		u.SetName(name)
		u.SetNamespace(ns)
		u.SetAnnotations(ann)
		return calicoObject(u)
	}
	http := map[string]any{"methods": []any{"GET"}}
	st := &calicoState{}
	gets := st.convert(api.KindGlobalNetworkPolicy, cr("GlobalNetworkPolicy", "", "default.gets", map[string]string{calicoMetadataAnnotation: `{"name":"gets"}`},
		map[string]any{"tier": "default", "selector": "app == 'web'", "ingress": []any{map[string]any{"action": "Allow", "protocol": "TCP", "http": http}}}), "gets")
	guard := st.convert(api.KindNetworkPolicy, cr("NetworkPolicy", "shop", "guard", nil,
		map[string]any{"ingress": []any{map[string]any{"action": "Deny", "protocol": "TCP"}, map[string]any{"action": "Pass", "http": http}}}), "guard")
	hep := st.convert(api.KindHostEndpoint, cr("HostEndpoint", "", "node-a-eth0", nil,
		map[string]any{"node": "node-a", "interfaceName": "eth0", "expectedIPs": []any{"nope"}}), "hep")
	st.leftover("globalthreatfeeds", []string{"tor-exits"})
	st.leftover("clusterinformations", []string{"default"})

	if gets == nil || gets.Meta().Name != "gets" || len(st.narrowed) != 1 || st.narrowed[0].Name != "gets" {
		t.Errorf("narrowed policy %v, narrowed %+v", gets, st.narrowed)
	} else if p := gets.(*api.GlobalNetworkPolicy).Spec; len(p.Ingress) != 0 || len(p.Types) != 1 || p.Types[0] != api.PolicyTypeIngress {
		t.Errorf("narrowed spec %+v, want Ingress with no rules", p)
	}
	if guard != nil || hep != nil {
		t.Errorf("carried %v %v, want refused", guard, hep)
	}
	var names []string
	for _, l := range st.losses {
		names = append(names, l.Kind+" "+l.Name)
	}
	if got := strings.Join(names, ", "); got != "NetworkPolicy shop.guard, HostEndpoint node-a-eth0, globalthreatfeeds tor-exits" {
		t.Errorf("losses %s", got)
	}
	if len(st.skipped) != 1 || !strings.HasPrefix(st.skipped[0], "1 clusterinformations (default)") {
		t.Errorf("notices %q", st.skipped)
	}
}
