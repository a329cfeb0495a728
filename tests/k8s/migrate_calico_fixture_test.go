package k8s_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/pkg/etcdserver"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/testbin"
)

// calicoKDDCluster starts a kube-apiserver with Calico's CRDs
// (startCalicoKDD) and writes a small Calico cluster the way Calico's
// components write it: custom resources as calico-node, the CNI plugin
// and calicoctl create them, Nodes annotated as calico-node annotates
// them, pods as the CNI plugin annotates them with the status the
// kubelet reports.
// With v3, Calico's CRDs are those of its projectcalico.org/v3 installs.
func calicoKDDCluster(t *testing.T, v3 bool) (*kubeapiserver.Server, *rest.Config) {
	t.Helper()
	crds := "calico-crds"
	if v3 {
		crds = "calico-crds-v3"
	}
	srv, rc := startCalicoKDD(t, crds)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	writeKubeObjects(ctx, t, kubernetes.NewForConfigOrDie(rc))
	objs := calicoKDDObjects()
	if v3 {
		objs = strings.NewReplacer("apiVersion: crd.projectcalico.org/v1", "apiVersion: projectcalico.org/v3",
			`deleted: "false"`, "deleted: false", "kind: IPAMConfig\n", "kind: IPAMConfiguration\n").Replace(objs)
	}
	kubectlCreate(t, srv, objs)
	// Calico's controllers report a pool's state in its status.
	pools := "ippools.crd.projectcalico.org"
	if v3 {
		pools = "ippools.projectcalico.org"
	}
	if out, errOut, err := kubectl(t, srv, "patch", pools, "default-ipv4-ippool", "--subresource=status", "--type=merge", "-p",
		`{"status":{"conditions":[{"type":"Allocatable","status":"True","reason":"PoolEnabled","message":"","lastTransitionTime":"2026-11-01T10:00:00Z"}]}}`); err != nil {
		t.Fatalf("pool status: %v\n%s%s", err, out, errOut)
	}
	return srv, rc
}

// startCalicoKDD starts a kube-apiserver of its own (Calico's objects
// are cluster-wide, and the migration reads every pod and namespace, so
// the shared server's other tests would change its plan) and installs
// Calico's CRDs (testdata/<crds>, copied from Calico's repository).
func startCalicoKDD(t *testing.T, crds string) (*kubeapiserver.Server, *rest.Config) {
	t.Helper()
	skipShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := kubeapiserver.Build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	etcd, err := etcdserver.Start(ctx, etcdserver.Config{Dir: filepath.Join(dir, "etcd"), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", NoFsync: true, LogLevel: "fatal"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Close)
	srv, err := kubeapiserver.Start(ctx, kubeapiserver.Config{Binary: bin, Dir: filepath.Join(dir, "apiserver"), EtcdServers: etcd.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := kubectl(t, srv, "create", "-f", filepath.Join("testdata", crds)); err != nil {
		t.Fatalf("installing Calico's CRDs: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := kubectl(t, srv, "wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"); err != nil {
		t.Fatalf("Calico's CRDs not established: %v\n%s%s", err, out, errOut)
	}
	return srv, rc
}

// kubectlCreate creates the objects of a YAML stream.
func kubectlCreate(t *testing.T, srv *kubeapiserver.Server, yaml string) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := kubectl(t, srv, "create", "-f", f); err != nil {
		t.Fatalf("kubectl create: %v\n%s%s", err, out, errOut)
	}
}

// Container IDs of the fixture's pods (the CNI plugin's annotation and
// handle k8s-pod-network.<id>).
const (
	webCID = "3f2a9c1b7d4e5f60718293a4b5c6d7e8"
	dbCID  = "8b1c2d3e4f5a69788796a5b4c3d2e1f0"
)

// calicoVeth is Calico's host-side device name for a pod: "cali" and the
// first 11 hex digits of sha1("<namespace>.<pod>") (libcalico-go's
// VethNameForWorkload).
func calicoVeth(ns, pod string) string {
	sum := sha1.Sum([]byte(ns + "." + pod))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}

// writeKubeObjects writes the Kubernetes side: namespaces, service
// accounts, nodes as calico-node annotates them and pods as Calico's CNI
// plugin annotates them, with the status the kubelet would report.
func writeKubeObjects(ctx context.Context, t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "shop"}}}, metav1.CreateOptions{}))
	for _, sa := range []struct{ ns, name string }{{"shop", "frontend"}, {"shop", "default"}, {"default", "default"}} {
		must(kube.CoreV1().ServiceAccounts(sa.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa.name}}, metav1.CreateOptions{}))
	}
	// A Kubernetes NetworkPolicy: it stays where it is.
	must(kube.NetworkingV1().NetworkPolicies("shop").Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "web-ingress"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}, metav1.CreateOptions{}))
	node := func(name string, ann map[string]string) {
		must(kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann,
			Labels: map[string]string{"kubernetes.io/hostname": name, "rack": "rack-1"}}}, metav1.CreateOptions{}))
	}
	node("node-a", map[string]string{"projectcalico.org/IPv4Address": "10.0.0.11/24", "projectcalico.org/IPv4IPIPTunnelAddr": "10.244.1.0"})
	node("node-b", map[string]string{"projectcalico.org/IPv4Address": "10.0.0.12/24", "projectcalico.org/IPv4IPIPTunnelAddr": "10.244.2.64", "projectcalico.org/ASNumber": "64513"})
	node("node-c", nil) // calico-node never ran here

	type pod struct {
		ns, name, node, sa, ip, cid string
		labels                      map[string]string
		ports                       []corev1.ContainerPort
		hostNet                     bool
		phase                       corev1.PodPhase
	}
	for _, p := range []pod{
		{ns: "shop", name: "web-1", node: "node-a", sa: "frontend", ip: "10.244.1.1", cid: webCID, labels: map[string]string{"app": "web"},
			ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {ContainerPort: 9090}}},
		{ns: "default", name: "db-1", node: "node-b", sa: "default", ip: "10.244.2.65", cid: dbCID, labels: map[string]string{"app": "db"},
			ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432}}},
		// Calico makes no endpoint for these: host network, not
		// scheduled, finished.
		{ns: "default", name: "hostnet", node: "node-a", hostNet: true},
		{ns: "default", name: "pending"},
		{ns: "default", name: "done", node: "node-a", ip: "10.244.1.9", cid: "aaaa", phase: corev1.PodSucceeded},
		// Addressed by something else than Calico's CNI plugin.
		{ns: "default", name: "other-cni", node: "node-b"},
	} {
		ann := map[string]string{}
		if p.ip != "" {
			ann["cni.projectcalico.org/podIP"] = p.ip + "/32"
			ann["cni.projectcalico.org/podIPs"] = p.ip + "/32"
			ann["cni.projectcalico.org/containerID"] = p.cid
		}
		obj := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: p.ns, Name: p.name, Labels: p.labels, Annotations: ann},
			Spec: corev1.PodSpec{NodeName: p.node, ServiceAccountName: p.sa, HostNetwork: p.hostNet,
				Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Ports: p.ports}}}}
		created, err := kube.CoreV1().Pods(p.ns).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.node == "" {
			continue
		}
		created.Status.Phase = corev1.PodRunning
		if p.phase != "" {
			created.Status.Phase = p.phase
		}
		switch {
		case p.hostNet:
			created.Status.PodIP = "10.0.0.11"
		case p.ip != "":
			created.Status.PodIP = p.ip
		default:
			created.Status.PodIP = "10.99.0.5"
		}
		created.Status.PodIPs = []corev1.PodIP{{IP: created.Status.PodIP}}
		must(kube.CoreV1().Pods(p.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}))
	}
}

// kddBlock is an IPAMBlock as Calico's IPAM writes it on the Kubernetes
// datastore (named after its CIDR), ordinal i allocated to attrs[i].
func kddBlock(cidr, node string, attrs ...string) string {
	name := strings.NewReplacer(".", "-", "/", "-").Replace(cidr)
	var allocs, unalloc []string
	for i := range 64 {
		if i < len(attrs) {
			allocs = append(allocs, strconv.Itoa(i))
			continue
		}
		allocs = append(allocs, "null")
		unalloc = append(unalloc, strconv.Itoa(i))
	}
	return fmt.Sprintf(`apiVersion: crd.projectcalico.org/v1
kind: IPAMBlock
metadata: {name: %s}
spec:
  cidr: %s
  affinity: host:%s
  strictAffinity: false
  allocations: [%s]
  unallocated: [%s]
  attributes: [%s]
  deleted: false
  sequenceNumber: 5
`, name, cidr, node, strings.Join(allocs, ", "), strings.Join(unalloc, ", "), strings.Join(attrs, ", "))
}

// kddAffinity is a BlockAffinity as Calico writes it ("deleted" is a
// string in crd.projectcalico.org/v1).
func kddAffinity(node, cidr, state string) string {
	name := node + "-" + strings.NewReplacer(".", "-", "/", "-").Replace(cidr)
	return fmt.Sprintf(`apiVersion: crd.projectcalico.org/v1
kind: BlockAffinity
metadata: {name: %s}
spec: {state: %s, node: %s, cidr: %s, deleted: "false", type: host}
`, name, state, node, cidr)
}

// kddHandle is an IPAMHandle (named after its lower-cased ID).
func kddHandle(id, cidr string) string {
	return fmt.Sprintf(`apiVersion: crd.projectcalico.org/v1
kind: IPAMHandle
metadata: {name: %s}
spec: {handleID: %s, block: {"%s": 1}, deleted: false}
`, strings.ToLower(id), id, cidr)
}

func tunnelAttr(handle, node string) string {
	return fmt.Sprintf(`{handle_id: %s, secondary: {node: %s, type: ipipTunnelAddress}}`, handle, node)
}

func podAttr(cid, ns, pod, node string) string {
	return fmt.Sprintf(`{handle_id: k8s-pod-network.%s, secondary: {namespace: %s, node: %s, pod: %s, timestamp: "2026-11-01 09:00:00.1 +0000 UTC"}}`, cid, ns, node, pod)
}

// calicoKDDObjects is the fixture's Calico custom resources.
func calicoKDDObjects() string {
	docs := []string{`apiVersion: crd.projectcalico.org/v1
kind: IPPool
metadata:
  name: default-ipv4-ippool
  annotations:
    projectcalico.org/metadata: '{"uid":"6a1f5f0e-1f2e-4d6b-9a55-2f6f1f7c2b10","creationTimestamp":"2026-11-01T10:00:00Z"}'
spec: {cidr: 10.244.0.0/16, ipipMode: Always, vxlanMode: Never, natOutgoing: true, blockSize: 26, nodeSelector: all(), allowedUses: [Workload, Tunnel]}
`, `apiVersion: crd.projectcalico.org/v1
kind: BGPConfiguration
metadata: {name: default}
spec: {logSeverityScreen: Info, nodeToNodeMeshEnabled: true, asNumber: 64512}
`, `apiVersion: crd.projectcalico.org/v1
kind: BGPPeer
metadata: {name: rack1-tor}
spec: {peerIP: 10.0.0.1, asNumber: 64567, nodeSelector: "rack == 'rack-1'"}
`, `apiVersion: crd.projectcalico.org/v1
kind: BGPFilter
metadata: {name: pods-only}
spec:
  exportV4: [{action: Accept, matchOperator: In, cidr: 10.244.0.0/16}]
`, `apiVersion: crd.projectcalico.org/v1
kind: Tier
metadata: {name: security}
spec: {order: 100}
`,
		// The tiers Calico (3.30 and later) always has.
		`apiVersion: crd.projectcalico.org/v1
kind: Tier
metadata: {name: kube-admin}
spec: {order: 1000, defaultAction: Pass}
`, `apiVersion: crd.projectcalico.org/v1
kind: Tier
metadata: {name: default}
spec: {order: 1000000, defaultAction: Deny}
`, `apiVersion: crd.projectcalico.org/v1
kind: Tier
metadata: {name: kube-baseline}
spec: {order: 10000000, defaultAction: Pass}
`, `apiVersion: crd.projectcalico.org/v1
kind: GlobalNetworkPolicy
metadata: {name: security.deny-db-from-web}
spec:
  tier: security
  order: 10
  selector: app == 'db'
  types: [Ingress]
  ingress: [{action: Deny, protocol: TCP, source: {selector: app == 'web'}}]
`, `apiVersion: crd.projectcalico.org/v1
kind: GlobalNetworkPolicy
metadata: {name: http-gets}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, http: {methods: [GET]}}]
`, `apiVersion: crd.projectcalico.org/v1
kind: NetworkPolicy
metadata: {name: allow-web, namespace: shop}
spec:
  selector: app == 'web'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [http]}}]
`, `apiVersion: crd.projectcalico.org/v1
kind: NetworkPolicy
metadata: {name: knp.default.legacy, namespace: shop}
spec:
  selector: all()
  types: [Ingress]
`, `apiVersion: crd.projectcalico.org/v1
kind: GlobalNetworkSet
metadata: {name: blocked, labels: {role: blocked}}
spec: {nets: [192.0.2.0/24]}
`, `apiVersion: crd.projectcalico.org/v1
kind: NetworkSet
metadata: {name: partners, namespace: shop, labels: {role: partner}}
spec: {nets: [198.51.100.0/24]}
`, `apiVersion: crd.projectcalico.org/v1
kind: IPAMConfig
metadata: {name: default}
spec: {strictAffinity: false, autoAllocateBlocks: true, maxBlocksPerHost: 4}
`, `apiVersion: crd.projectcalico.org/v1
kind: HostEndpoint
metadata: {name: node-a-eth0}
spec: {node: node-a, interfaceName: eth0, expectedIPs: [10.0.0.11]}
`, `apiVersion: crd.projectcalico.org/v1
kind: IPReservation
metadata: {name: keep-out}
spec: {reservedCIDRs: [10.244.1.32/28]}
`, `apiVersion: crd.projectcalico.org/v1
kind: ClusterInformation
metadata: {name: default}
spec: {clusterGUID: 0b5c4f2e6a7d4e0f9c1b2a3d4e5f6a7b, datastoreReady: true}
`,
		kddBlock("10.244.1.0/26", "node-a", tunnelAttr("ipip-tunnel-addr-node-a", "node-a"), podAttr(webCID, "shop", "web-1", "node-a")),
		kddBlock("10.244.2.64/26", "node-b", tunnelAttr("ipip-tunnel-addr-node-b", "node-b"), podAttr(dbCID, "default", "db-1", "node-b"),
			`{handle_id: wireguard-tunnel-addr-node-b, secondary: {node: node-b, type: wireguardTunnelAddress}}`),
		// Claimed, never confirmed (calico-node died half-way).
		kddBlock("10.244.3.0/26", "node-b"),
		kddAffinity("node-a", "10.244.1.0/26", "confirmed"),
		kddAffinity("node-b", "10.244.2.64/26", "confirmed"),
		kddAffinity("node-b", "10.244.3.0/26", "pending"),
		kddHandle("ipip-tunnel-addr-node-a", "10.244.1.0/26"),
		kddHandle("ipip-tunnel-addr-node-b", "10.244.2.64/26"),
		kddHandle("k8s-pod-network."+webCID, "10.244.1.0/26"),
		kddHandle("k8s-pod-network."+dbCID, "10.244.2.64/26"),
		kddHandle("wireguard-tunnel-addr-node-b", "10.244.2.64/26"),
	}
	return strings.Join(docs, "---\n")
}

// migrateCtl runs the built routedctl against routed's etcd at
// endpoint and returns stdout, stderr and the exit code. A first
// argument "@prog" runs prog with the rest instead (a wrapper that execs
// routedctl).
func migrateCtl(t *testing.T, endpoint string, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	prog := testbin.Path(t, "routedctl")
	if len(args) > 0 && strings.HasPrefix(args[0], "@") {
		prog, args = args[0][1:], args[1:]
	}
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(append(os.Environ(), "ETCD_ENDPOINTS="+endpoint), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("routedctl %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}
