package migrate

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/routed-net/routed/pkg/api"
)

func testPod(mut func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{annPodIP: "10.244.1.1/32", annPodIPs: "10.244.1.1/32,fd00:244::1/128", annContainerID: "c0ffee"}},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: "frontend", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 9090}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if mut != nil {
		mut(p)
	}
	return p
}

func testBlocks() blockSet {
	v4, v6 := netip.MustParseAddr("10.244.1.1"), netip.MustParseAddr("fd00:244::1")
	return blockSet{
		handles: map[netip.Addr]string{v4: "k8s-pod-network.c0ffee", v6: "k8s-pod-network.c0ffee"},
		pods:    map[netip.Addr]string{v4: "shop/web-1", v6: "shop/web-1"},
	}
}

// TestPodEndpointAsCalicoDerivesIt: a running pod Calico's CNI plugin
// addressed becomes the endpoint Calico derives (both families, its
// device named cali + sha1("<namespace>.<pod>")[:11], labels, profiles,
// service account and only named ports), under the handle holding its
// addresses.
func TestPodEndpointAsCalicoDerivesIt(t *testing.T) {
	w, err := podEndpoint(testPod(nil), testBlocks())
	if err != nil {
		t.Fatal(err)
	}
	// printf shop.web-1 | sha1sum: 751425ce827...
	if w.Spec.InterfaceName != "cali751425ce827" {
		t.Errorf("interface %s", w.Spec.InterfaceName)
	}
	if w.Metadata.Name != "node--a-k8s-shop-web--1-eth0" || w.Spec.Handle != "k8s-pod-network.c0ffee" || w.Spec.ContainerID != "c0ffee" ||
		strings.Join(w.Spec.IPNetworks, ",") != "10.244.1.1/32,fd00:244::1/128" {
		t.Errorf("endpoint %s %+v", w.Metadata.Name, w.Spec)
	}
	if strings.Join(w.Spec.Profiles, ",") != "kns.shop,ksa.shop.frontend" || w.Spec.ServiceAccountName != "frontend" ||
		w.Metadata.Labels["app"] != "web" || w.Metadata.Labels[api.LabelServiceAccount] != "frontend" {
		t.Errorf("identity %+v %v", w.Spec, w.Metadata.Labels)
	}
	if len(w.Spec.Ports) != 2 || w.Spec.Ports[0].Name != "http" || w.Spec.Ports[1].Name != "dns" {
		t.Errorf("ports %+v (want the two named ones)", w.Spec.Ports)
	}
}

// TestPodEndpointSkipsAndRefuses: pods Calico has no endpoint for are
// left out silently; a pod whose address Calico's IPAM holds for
// another pod, or not at all, is refused naming why; an older pod
// without the containerID annotation takes it from its handle.
func TestPodEndpointSkipsAndRefuses(t *testing.T) {
	for name, mut := range map[string]func(*corev1.Pod){
		"host network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"unscheduled":  func(p *corev1.Pod) { p.Spec.NodeName = "" },
		"succeeded":    func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded },
		"released": func(p *corev1.Pod) {
			p.Annotations[annPodIP] = ""
			p.DeletionTimestamp = &metav1.Time{}
		},
	} {
		if w, err := podEndpoint(testPod(mut), testBlocks()); w != nil || err != nil {
			t.Errorf("%s: %v %v", name, w, err)
		}
	}
	for name, c := range map[string]struct {
		mut  func(*corev1.Pod)
		want string
	}{
		"other pod's":  {func(p *corev1.Pod) { p.Name = "web-2" }, "its address 10.244.1.1 is held by Calico's IPAM for pod shop/web-1"},
		"not Calico's": {func(p *corev1.Pod) { p.Annotations = nil; p.Status.PodIP = "10.99.0.5" }, "10.99.0.5 is not allocated in a carried Calico block"},
		"no address":   {func(p *corev1.Pod) { p.Annotations = nil }, "no address yet"},
		"bad address":  {func(p *corev1.Pod) { p.Annotations[annPodIPs] = "10.244.1.x" }, `"10.244.1.x" is neither an address nor a CIDR`},
	} {
		_, err := podEndpoint(testPod(c.mut), testBlocks())
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
	w, err := podEndpoint(testPod(func(p *corev1.Pod) { delete(p.Annotations, annContainerID) }), testBlocks())
	if err != nil || w.Spec.ContainerID != "c0ffee" {
		t.Errorf("container from the handle: %v %+v", err, w)
	}
}

// TestKubeNodeFromAnnotations: the Node carries calico-node's address,
// AS number and tunnel address annotations and the node's labels over
// Calico's; a node calico-node never annotated is skipped, saying so.
func TestKubeNodeFromAnnotations(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Labels: map[string]string{"rack": "r1"},
		Annotations: map[string]string{annNodeIPv4: "10.0.0.12/24", annNodeASN: "64513", annNodeIPIP: "10.244.2.64",
			annNodeVXLAN: "10.244.9.1", annNodeVXLANMAC: "66:aa:bb:cc:dd:ee", annNodeLabels: `{"rack":"calico","zone":"z1"}`}}}
	r, _, skip, err := kubeNode(n)
	if err != nil || skip != "" {
		t.Fatal(err, skip)
	}
	got := r.(*api.Node)
	b, _ := json.Marshal(got)
	if got.Spec.BGP == nil || got.Spec.BGP.IPv4Address != "10.0.0.12/24" || got.Spec.BGP.ASNumber != 64513 || got.Spec.BGP.IPv4IPIPTunnelAddr != "10.244.2.64" ||
		got.Spec.IPv4VXLANTunnelAddr != "10.244.9.1" || got.Metadata.Labels["rack"] != "r1" || got.Metadata.Labels["zone"] != "z1" {
		t.Errorf("node: %s", b)
	}
	if _, _, skip, _ := kubeNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}); !strings.Contains(skip, "calico-node left no address") {
		t.Errorf("unannotated node: %q", skip)
	}
}

// TestDeletedFlag reads Calico's "deleted" in both spellings.
func TestDeletedFlag(t *testing.T) {
	for raw, want := range map[string]bool{`"true"`: true, `"false"`: false, `true`: true, `false`: false, ``: false} {
		if got := deletedFlag(json.RawMessage(raw)); got != want {
			t.Errorf("%s: %v", raw, got)
		}
	}
}

// TestCalicoObjectFromCustomResource: a custom resource becomes the
// Calico object it stands for: its spec, its name and namespace, its
// labels merged with those of Calico's metadata annotation, and not its
// status (written by Calico's components; an IPPool with conditions
// still carries).
func TestCalicoObjectFromCustomResource(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool",
		"metadata": map[string]any{"name": "p", "resourceVersion": "7", "uid": "u", "labels": map[string]any{"a": "1"},
			"annotations": map[string]any{"projectcalico.org/metadata": `{"labels":{"b":"2"},"annotations":{"note":"x"}}`, "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
		"spec":   map[string]any{"cidr": "10.9.0.0/16", "ipipMode": "Never", "vxlanMode": "Never", "blockSize": int64(26), "nodeSelector": "all()"},
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Allocatable", "status": "True"}}},
	}}
	r, warnings, err := decodeCalicoObject(api.KindIPPool, calicoObject(u), "test")
	if err != nil {
		t.Fatal(err)
	}
	p := r.(*api.IPPool)
	if p.Spec.CIDR != "10.9.0.0/16" || p.Metadata.Labels["a"] != "1" || p.Metadata.Labels["b"] != "2" || p.Metadata.Annotations["note"] != "x" || len(p.Metadata.Annotations) != 1 {
		t.Errorf("pool %+v %+v", p.Metadata, p.Spec)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings %v", warnings)
	}
}
