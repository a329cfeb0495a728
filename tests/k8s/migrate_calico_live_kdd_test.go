package k8s_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/lab"
)

// kddLive is a live Calico cluster on the Kubernetes datastore: a
// kube-apiserver of its own with Calico's CRDs holds Calico's state and
// the pods (namespace shop).
type kddLive struct {
	srv *kubeapiserver.Server
	kc  kubernetes.Interface
}

func newKDDLive(t *testing.T) liveCalico {
	srv, rc := startCalicoKDD(t, "calico-crds")
	return &kddLive{srv: srv, kc: kubernetes.NewForConfigOrDie(rc)}
}

func (k *kddLive) kube() (*kubeapiserver.Server, kubernetes.Interface) { return k.srv, k.kc }

func (k *kddLive) namespace() string { return "shop" }

// setUp writes what a running Calico cluster holds on the Kubernetes
// datastore for the lab's nodes: the pool (no encapsulation), the mesh's
// BGP configuration, the cluster's readiness, Calico's tiers and the
// policies to migrate, and the Kubernetes side: nodes annotated by
// calico-node, the pods' namespace and accounts.
func (k *kddLive) setUp(ctx context.Context, t *testing.T, l *lab.Lab) {
	t.Helper()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range l.Topo.Nodes {
		must(k.kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name,
			Labels:      map[string]string{"kubernetes.io/hostname": n.Name},
			Annotations: map[string]string{"projectcalico.org/IPv4Address": n.Addr.String()}}}, metav1.CreateOptions{}))
	}
	must(k.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}))
	for _, ns := range []string{"shop", "default"} {
		must(k.kc.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))
	}
	kubectlCreate(t, k.srv, strings.Join(liveCalicoObjects(l.Topo.PoolCIDR, l.Topo.NodeAS, "shop", "k8s,bgp,kdd"), "---\n"))
}

// cniDatastore: the plugin keeps Calico's state in the API server it
// reads the pods from (the configuration's kubeconfig).
func (k *kddLive) cniDatastore(*testing.T, string) map[string]any {
	return map[string]any{"datastore_type": "kubernetes"}
}

// affinities reads the confirmed blocks of each node from Calico's
// BlockAffinity resources, as calico-node's confd reads them.
func (k *kddLive) affinities(_ context.Context, t *testing.T) map[string][]netip.Prefix {
	t.Helper()
	out, errOut, err := kubectl(t, k.srv, "get", "blockaffinities.crd.projectcalico.org", "-o", "json")
	if err != nil {
		t.Fatalf("blockaffinities: %v %s", err, errOut)
	}
	return confirmedBlocks(t, out)
}

// confirmedBlocks are the confirmed blocks of each node in the output
// of `kubectl get blockaffinities.crd.projectcalico.org -o json`.
func confirmedBlocks(t *testing.T, out string) map[string][]netip.Prefix {
	t.Helper()
	var list struct {
		Items []struct {
			Spec struct{ Node, CIDR, State string } `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]netip.Prefix{}
	for _, it := range list.Items {
		if it.Spec.State == "confirmed" {
			blocks[it.Spec.Node] = append(blocks[it.Spec.Node], netip.MustParsePrefix(it.Spec.CIDR))
		}
	}
	return blocks
}

// freeze disables Calico's pool (the doc's `kubectl patch ippools...`).
func (k *kddLive) freeze(_ context.Context, t *testing.T) {
	t.Helper()
	if out, errOut, err := kubectl(t, k.srv, "patch", "ippools.crd.projectcalico.org", "default-ipv4-ippool", "--type", "merge", "-p", `{"spec":{"disabled":true}}`); err != nil {
		t.Fatalf("freezing Calico's pool: %v\n%s%s", err, out, errOut)
	}
}

// from: a kubeconfig reaching the API server from the router namespace.
func (k *kddLive) from(t *testing.T, l *lab.Lab, dir string) []string {
	return []string{"--from-kubeconfig", apiRelay(t, k.srv, l.Topo.RouterNS(), dir)}
}
