package plugin

import (
	"net"
	"reflect"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestEndpointIdentity: a pod's endpoint carries Calico's identity
// labels and profiles besides the pod's own labels; a bare CNI
// container's carries none; the endpoint validates.
func TestEndpointIdentity(t *testing.T) {
	c := testCall(t, `{"name":"n","etcd_endpoints":"http://127.0.0.1:1","ipam":{"type":"host-local"}}`)
	c.orchestrator, c.k8s.Namespace, c.k8s.Pod, c.hostVeth = "k8s", "shop", "web-0", "cali0123456789a"
	mac, _ := net.ParseMAC("02:00:00:00:00:01")
	ports := []api.WorkloadEndpointPort{{Name: "http", Protocol: api.ProtocolFromName("TCP"), Port: 8080}}
	pod := &PodInfo{Labels: map[string]string{"app": "web"}, ServiceAccount: "frontend", Ports: ports}
	w := c.buildEndpoint([]net.IP{net.ParseIP("10.0.0.5")}, mac, pod)

	wantLabels := map[string]string{"app": "web", api.LabelNamespace: "shop", api.LabelOrchestrator: "k8s", api.LabelServiceAccount: "frontend"}
	if !reflect.DeepEqual(w.Metadata.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", w.Metadata.Labels, wantLabels)
	}
	if want := []string{"kns.shop", "ksa.shop.frontend"}; !reflect.DeepEqual(w.Spec.Profiles, want) {
		t.Errorf("profiles %v, want %v", w.Spec.Profiles, want)
	}
	if w.Spec.ServiceAccountName != "frontend" || !reflect.DeepEqual(w.Spec.Ports, ports) {
		t.Errorf("spec %+v", w.Spec)
	}
	if pod.Labels[api.LabelNamespace] != "" {
		t.Error("the pod's own label map was written to")
	}
	if err := w.Validate(); err != nil {
		t.Errorf("endpoint does not validate: %v", err)
	}

	// Without a pod source: the identity CNI_ARGS give, no service account.
	w = c.buildEndpoint([]net.IP{net.ParseIP("10.0.0.5")}, mac, nil)
	if w.Metadata.Labels[api.LabelNamespace] != "shop" || w.Metadata.Labels[api.LabelServiceAccount] != "" || !reflect.DeepEqual(w.Spec.Profiles, []string{"kns.shop"}) {
		t.Errorf("without pod info: labels %v profiles %v", w.Metadata.Labels, w.Spec.Profiles)
	}
	// A service account name too long for a label value keeps its profile.
	long := strings.Repeat("a", 70)
	w = c.buildEndpoint(nil, mac, &PodInfo{ServiceAccount: long})
	if _, has := w.Metadata.Labels[api.LabelServiceAccount]; has || w.Spec.Profiles[1] != "ksa.shop."+long {
		t.Errorf("long service account: labels %v profiles %v", w.Metadata.Labels, w.Spec.Profiles)
	}

	c.orchestrator, c.k8s.Namespace, c.k8s.Pod = "cni", "", ""
	if w = c.buildEndpoint(nil, mac, nil); len(w.Metadata.Labels) != 0 || len(w.Spec.Profiles) != 0 {
		t.Errorf("bare CNI container: labels %v profiles %v", w.Metadata.Labels, w.Spec.Profiles)
	}
}
