package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// Calico's CNI plugin and IPAM as released in Calico v3.31.0, from the
// Go module proxy. The checksum database does not know these
// pseudo-versions, so their hashes are pinned here instead.
var calicoModules = []struct{ path, version, sum, dir string }{
	{"github.com/projectcalico/calico", "v0.0.0-20251021213802-b1f3c43f8437", "h1:PbLe6D0Yis8ce4F+o/Dmlrv4Her2ZN6ns8rmlZoFoEY=", "."},
	// Nested modules the main one replaces with its own directories
	// (absent from its module zip).
	{"github.com/projectcalico/calico/lib/std", "v0.0.0-20251021213802-b1f3c43f8437", "h1:iLY3Uzt4pVX3jpS9Wt+mxakq1nfzN/32t6YZK9n7p/U=", "lib/std"},
	{"github.com/projectcalico/api", "v0.0.0-20251022175904-f2ab03771208", "h1:ltTWo/cCc/8pEpzmlzIjt6r2383x2XDPkuBcd/9kE3k=", "api"},
}

// buildCalicoCNI builds Calico's CNI plugin (one binary: "calico", and
// its IPAM when invoked as "calico-ipam") once into the test cache.
func buildCalicoCNI(t *testing.T) string {
	t.Helper()
	out := filepath.Join(kubeapiserver.CacheDir(), "calico-cni", "v3.31.0", "calico")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	env := append(os.Environ(), "GONOSUMDB=github.com/projectcalico", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	src := calicoSource(ctx, t, env)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := out + fmt.Sprintf(".%d", os.Getpid())
	t.Logf("building Calico's CNI plugin (v3.31.0) into %s", out)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "./cni-plugin/cmd/calico")
	cmd.Env, cmd.Dir = env, src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building Calico's CNI plugin: %v\n%s", err, b)
	}
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMigrateCalicoKDDFromCalicoCNI: Calico's own CNI plugin and IPAM
// (v3.31.0) on the Kubernetes datastore set up two pods on two nodes (a
// network namespace each, the plugin running in its node's namespace):
// they write Calico's IPAM blocks, affinities and handles and annotate
// the pods. The migration carries what they wrote: each pod's endpoint
// names the device Calico's plugin created on its node and the address
// it gave, under Calico's handle; `routedctl ipam check` is clean; a
// second run is a no-op.
func TestMigrateCalicoKDDFromCalicoCNI(t *testing.T) {
	requireRoot(t)
	calico := buildCalicoCNI(t)
	srv, rc := startCalicoKDD(t, "calico-crds")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(rc)

	// What calico-node's startup writes: the pool, the cluster's
	// readiness, each node's address.
	kubectlCreate(t, srv, `apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata: {name: default-ipv4-ippool}
spec: {cidr: 10.245.0.0/16, ipipMode: Never, vxlanMode: Never, natOutgoing: true, blockSize: 26, nodeSelector: all()}
---
apiVersion: crd.projectcalico.org/v1
kind: ClusterInformation
metadata: {name: default}
spec: {clusterGUID: 4d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a, clusterType: "k8s,kdd", calicoVersion: v3.31.0, datastoreReady: true}
`)
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []string{"node-a", "node-b"} {
		must(kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Annotations: map[string]string{"projectcalico.org/IPv4Address": fmt.Sprintf("10.0.0.%d/24", 21+i)}}}, metav1.CreateOptions{}))
	}
	must(kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}))
	for _, ns := range []string{"shop", "default"} {
		must(kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))
	}

	dir := t.TempDir()
	bin := calicoBinDir(t, calico, dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, srv.Kubeconfig(srv.URL, srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}

	pods := []*calicoPod{{ns: "shop", name: "web-1", node: "node-a", cid: "c0ffee0001"}, {ns: "default", name: "db-1", node: "node-b", cid: "c0ffee0002"}}
	for _, p := range pods {
		createPod(ctx, t, kube, p)
		calicoADD(ctx, t, bin, dir, p, srv, "")
		reportPodIP(ctx, t, kube, p)
	}

	store := dstest.Client(t)
	ep := store.Endpoints()[0]
	out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
	t.Logf("migration:\n%s%s", out, errOut)
	if code != 0 || strings.Contains(out, "Not carried over: pod") {
		t.Fatalf("migrate: code %d", code)
	}
	for _, p := range pods {
		name := api.WorkloadEndpointName(p.node, "k8s", p.ns, p.name, p.cid, "eth0")
		r, err := store.Get(ctx, api.KindWorkloadEndpoint, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s := r.(*api.WorkloadEndpoint).Spec
		if s.InterfaceName != p.dev || strings.Join(s.IPNetworks, ",") != p.ip+"/32" || s.Handle != "k8s-pod-network."+p.cid || s.ContainerID != p.cid {
			t.Errorf("%s/%s: endpoint %+v, Calico set up %s on %s", p.ns, p.name, s, p.ip, p.dev)
		}
		if out, _, _ := migrateCtl(t, ep, nil, "ipam", "show", "--ip", p.ip); !strings.Contains(out, "k8s-pod-network."+p.cid) {
			t.Errorf("%s not held by Calico's handle:\n%s", p.ip, out)
		}
	}
	if out, errOut, code := migrateCtl(t, ep, nil, "ipam", "check"); code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
	if code != 0 || !regexp.MustCompile(`Migrated: 0 to create, 0 to update, \d+ unchanged, 0 conflicts`).MatchString(out) {
		t.Fatalf("second run: code %d\n%s%s", code, out, errOut)
	}
}

// calicoPod is a pod Calico's CNI plugin sets up in a network namespace
// of its own, the plugin running in its node's namespace (nodeNS); ip
// and dev are what the plugin gave it.
type calicoPod struct{ ns, name, node, cid, ip, ip6, dev, nodeNS string }

func createPod(ctx context.Context, t *testing.T, kube kubernetes.Interface, p *calicoPod) {
	t.Helper()
	_, err := kube.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: map[string]string{"app": p.name}},
		Spec: corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10",
			Ports: []corev1.ContainerPort{{Name: "svc", ContainerPort: 8080}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// reportPodIP sets the pod's status as the kubelet does once its
// sandbox has the address.
func reportPodIP(ctx context.Context, t *testing.T, kube kubernetes.Interface, p *calicoPod) {
	t.Helper()
	got, err := kube.CoreV1().Pods(p.ns).Get(ctx, p.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Calico set up %s/%s: %s on %s, annotations %v", p.ns, p.name, p.ip, p.dev, got.Annotations)
	got.Status.Phase, got.Status.PodIP, got.Status.PodIPs = corev1.PodRunning, p.ip, []corev1.PodIP{{IP: p.ip}}
	if p.ip6 != "" { // a dual-stack pod: the kubelet reports both
		got.Status.PodIPs = append(got.Status.PodIPs, corev1.PodIP{IP: p.ip6})
	}
	if _, err := kube.CoreV1().Pods(p.ns).UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// calicoADD runs Calico's CNI ADD (calicoCNIAdd) for p in fresh node
// and pod network namespaces. The plugin reaches the API server (and,
// when calicoEtcd is set, Calico's etcd, its datastore; else the API
// server is) through relays on the node namespace's loopback.
func calicoADD(ctx context.Context, t *testing.T, bin, dir string, p *calicoPod, srv *kubeapiserver.Server, calicoEtcd string) {
	t.Helper()
	node, pod := newNetNS(t), newNetNS(t)
	p.nodeNS = node.Path()
	if err := node.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, p.name+".kubeconfig")
	apiAddr := newRelay(t, node, strings.TrimPrefix(srv.URL, "https://"))
	if err := os.WriteFile(kubeconfig, srv.Kubeconfig("https://"+apiAddr, srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	datastore := map[string]any{"datastore_type": "kubernetes"}
	if calicoEtcd != "" {
		datastore = map[string]any{"datastore_type": "etcdv3", "etcd_endpoints": "http://" + newRelay(t, node, strings.TrimPrefix(calicoEtcd, "http://"))}
	}
	calicoCNIAdd(ctx, t, bin, dir, kubeconfig, datastore, p, pod.Path())
}

// calicoBinDir is a CNI_PATH holding Calico's binary as both plugins.
func calicoBinDir(t *testing.T, calico, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"calico", "calico-ipam"} {
		if err := os.Symlink(calico, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

// TestMigrateCalicoEtcdFromCalicoCNI: the etcd source with the state
// Calico's own CNI plugin and IPAM (v3.31.0, datastore etcdv3) write
// for two pods on two nodes: the migration carries each pod's endpoint
// (the device the plugin created, its address, Calico's handle), `ipam
// check` is clean and a second run is a no-op.
func TestMigrateCalicoEtcdFromCalicoCNI(t *testing.T) {
	requireRoot(t)
	calico := buildCalicoCNI(t)
	srv := cluster(t) // the plugin reads the pods from Kubernetes
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	ns := "migetcd-" + randHex(3)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Calico's etcd, with what calico-node's startup writes there.
	calicoEtcd := etcdtest.Start(t).Endpoints[0]
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{calicoEtcd}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for k, v := range map[string]string{
		"/calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool": `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool"},"spec":{"cidr":"10.246.0.0/16","ipipMode":"Never","vxlanMode":"Never","natOutgoing":true,"blockSize":26,"nodeSelector":"all()"}}`,
		"/calico/resources/v3/projectcalico.org/clusterinformations/default": `{"kind":"ClusterInformation","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"clusterGUID":"5e6f","clusterType":"k8s,bgp","calicoVersion":"v3.31.0","datastoreReady":true}}`,
		"/calico/resources/v3/projectcalico.org/nodes/node-a":                `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-a"},"spec":{"bgp":{"ipv4Address":"10.0.0.31/24"},"orchRefs":[{"nodeName":"node-a","orchestrator":"k8s"}]}}`,
		"/calico/resources/v3/projectcalico.org/nodes/node-b":                `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-b"},"spec":{"bgp":{"ipv4Address":"10.0.0.32/24"},"orchRefs":[{"nodeName":"node-b","orchestrator":"k8s"}]}}`,
	} {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	bin := calicoBinDir(t, calico, dir)
	pods := []*calicoPod{{ns: ns, name: "web-1", node: "node-a", cid: "e7c0ffee01"}, {ns: ns, name: "db-1", node: "node-b", cid: "e7c0ffee02"}}
	for _, p := range pods {
		createPod(ctx, t, kube, p)
		calicoADD(ctx, t, bin, dir, p, srv, calicoEtcd)
	}

	store := dstest.Client(t)
	ep := store.Endpoints()[0]
	out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-etcd", calicoEtcd)
	t.Logf("migration:\n%s%s", out, errOut)
	if code != 0 || strings.Contains(out, "Not carried over: WorkloadEndpoint") {
		t.Fatalf("migrate: code %d", code)
	}
	for _, p := range pods {
		name := api.WorkloadEndpointName(p.node, "k8s", p.ns, p.name, p.cid, "eth0")
		r, err := store.Get(ctx, api.KindWorkloadEndpoint, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		w := r.(*api.WorkloadEndpoint)
		s := w.Spec
		if s.InterfaceName != p.dev || strings.Join(s.IPNetworks, ",") != p.ip+"/32" || s.Handle != "k8s-pod-network."+p.cid || s.ContainerID != p.cid || w.Metadata.Labels["app"] != p.name {
			t.Errorf("%s/%s: endpoint %+v %v, Calico set up %s on %s", p.ns, p.name, s, w.Metadata.Labels, p.ip, p.dev)
		}
	}
	if out, errOut, code := migrateCtl(t, ep, nil, "ipam", "check"); code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = migrateCtl(t, ep, nil, "migrate", "calico", "--from-etcd", calicoEtcd)
	if code != 0 || !regexp.MustCompile(`Migrated: 0 to create, 0 to update, \d+ unchanged, 0 conflicts`).MatchString(out) {
		t.Fatalf("second run: code %d\n%s%s", code, out, errOut)
	}
}
