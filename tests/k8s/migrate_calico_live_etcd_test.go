package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/lab"
)

// TestMigrateCalicoEtcdLiveNodeByNode: issue 38's live switch of a
// Calico cluster on the etcd datastore. Calico's own etcd holds what
// calico-node and calico-kube-controllers write there (the pool, the
// mesh's BGP configuration, the cluster's readiness, felix's global
// configuration, each node's Node with its BGP address, the
// namespace and service-account profiles, Calico's tiers, and the
// policies); Calico's own CNI plugin and IPAM
// (v3.31.0, datastore etcdv3) set up a pod on each of three lab nodes,
// writing the blocks, affinities, handles and workload endpoints; a
// BIRD 2 per node runs the mesh configuration calico-node's confd
// renders from those (the same template as on the Kubernetes
// datastore), and Calico's own felix per node (v3.31.0, nftables mode,
// datastore etcdv3, through the relay the CNI plugin uses) enforces the
// policies from that etcd. Then, as on the Kubernetes datastore and
// with the same assertions (liveSwitch): under UDP probes every 50 ms
// between the pods of every pair of nodes, Calico's pool is disabled in
// its etcd, `routedctl migrate calico --from-etcd` writes routed's etcd
// (plan, migration, routed's pool enabled, `ipam check` clean, policies
// under their names, profiles routed-controllers'), and each node
// switches (its BIRD killed and its felix SIGTERMed, routed started,
// Calico's routes and felix's `ip calico` table removed once routed is
// Ready): less than 1 s of probes lost per switch across the switched
// node, none between the others, the denies hold throughout, every pod
// keeps its address under Calico's handle, a new pod gets an address
// from its node's migrated block.
func TestMigrateCalicoEtcdLiveNodeByNode(t *testing.T) {
	liveSwitch(t, newEtcdLive, (*lab.CalicoBird).Kill, time.Second)
}

// etcdLive is a live Calico cluster on the etcd datastore: an etcd of
// Calico's own (not routed's), and the pods in the suite's API server
// (Calico's CNI plugin reads a pod's labels, service account and
// annotations there in etcd mode too), in a namespace of their own.
type etcdLive struct {
	srv      *kubeapiserver.Server
	kc       kubernetes.Interface
	ns       string
	endpoint string // Calico's etcd, from the test's network namespace
	cli      *clientv3.Client
	relays   map[string]string // Calico's etcd inside a lab namespace
}

func newEtcdLive(t *testing.T) liveCalico {
	srv := cluster(t)
	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	ep := etcdtest.Start(t).Endpoints[0]
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &etcdLive{srv: srv, kc: kubernetes.NewForConfigOrDie(rc), ns: "shop-" + randHex(3), endpoint: ep, cli: cli, relays: map[string]string{}}
}

func (e *etcdLive) kube() (*kubeapiserver.Server, kubernetes.Interface) { return e.srv, e.kc }

func (e *etcdLive) namespace() string { return e.ns }

// setUp writes the pods' namespace and account in Kubernetes, and in
// Calico's etcd what calico-node (its Node, the pool, the cluster's
// readiness, which felix waits for, and felix's global configuration),
// calico-kube-controllers (the profiles of the namespaces and service
// accounts) and the operator (the mesh's BGP configuration,
// the tiers, the policies) write there.
func (e *etcdLive) setUp(ctx context.Context, t *testing.T, l *lab.Lab) {
	t.Helper()
	if _, err := e.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kc.CoreV1().Namespaces().Delete(context.Background(), e.ns, metav1.DeleteOptions{}) })
	if _, err := e.kc.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, doc := range liveCalicoObjects(l.Topo.PoolCIDR, l.Topo.NodeAS, e.ns, "k8s,bgp") {
		k, v := calicoEtcdObject(t, doc)
		kv[k] = v
	}
	const res = "/calico/resources/v3/projectcalico.org/"
	// calico-node's start (ensureDefaultConfig) writes felix's global
	// configuration and, on etcd, node.<name> for each node with
	// defaultEndpointToHostAction Return (which its manifest's
	// FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT, set on the felixes here
	// too, overrides). routed's accept is Return, so they cost nothing.
	kv[res+"felixconfigurations/default"] = `{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default"},"spec":{"reportingInterval":"0s","logSeverityScreen":"Info"}}`
	for _, n := range l.Topo.Nodes {
		kv[res+"felixconfigurations/node."+n.Name] = fmt.Sprintf(`{"kind":"FelixConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"node.%s"},"spec":{"defaultEndpointToHostAction":"Return"}}`, n.Name)
		kv[res+"nodes/"+n.Name] = fmt.Sprintf(`{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":%q,"labels":{"kubernetes.io/hostname":%q}},"spec":{"bgp":{"ipv4Address":%q},"orchRefs":[{"nodeName":%q,"orchestrator":"k8s"}]}}`,
			n.Name, n.Name, n.Addr, n.Name)
	}
	// calico-kube-controllers' profiles, for every namespace and service
	// account of the cluster (a pod in any namespace has them).
	nss, err := e.kc.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nss.Items {
		kv[res+"profiles/kns."+n.Name] = calicoProfile(t, "kns."+n.Name, "pcns.", n.ObjectMeta, `"ingress":[{"action":"Allow"}],"egress":[{"action":"Allow"}],`)
	}
	sas, err := e.kc.CoreV1().ServiceAccounts("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sa := range sas.Items {
		name := "ksa." + sa.Namespace + "." + sa.Name
		kv[res+"profiles/"+name] = calicoProfile(t, name, "pcsa.", sa.ObjectMeta, "")
	}
	for k, v := range kv {
		if _, err := e.cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// calicoProfile is the Profile calico-kube-controllers writes into
// Calico's etcd for a namespace or service account (libcalico-go's
// NamespaceToProfile, ServiceAccountToProfile): its rules (JSON fields
// with a trailing comma, or none), and the object's labels and name
// under prefix ("pcns.", "pcsa.") to apply to its pods.
func calicoProfile(t *testing.T, name, prefix string, of metav1.ObjectMeta, rules string) string {
	t.Helper()
	labels := map[string]string{prefix + "projectcalico.org/name": of.Name}
	for k, v := range of.Labels {
		labels[prefix+k] = v
	}
	l, err := json.Marshal(labels)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`{"kind":"Profile","apiVersion":"projectcalico.org/v3","metadata":{"name":%q},"spec":{%s"labelsToApply":%s}}`, name, rules, l)
}

// calicoEtcdObject is the key and value under which libcalico-go's
// etcdv3 backend stores a Calico resource given as a
// crd.projectcalico.org/v1 document: projectcalico.org/v3 JSON under
// /calico/resources/v3/projectcalico.org/<plural>/[<namespace>/]<name>.
func calicoEtcdObject(t *testing.T, doc string) (string, string) {
	t.Helper()
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
		t.Fatal(err)
	}
	obj["apiVersion"] = "projectcalico.org/v3"
	kind, _ := obj["kind"].(string)
	md, _ := obj["metadata"].(map[string]any)
	plural := strings.ToLower(kind) + "s"
	if base, ok := strings.CutSuffix(strings.ToLower(kind), "y"); ok {
		plural = base + "ies"
	}
	key := "/calico/resources/v3/projectcalico.org/" + plural + "/"
	if ns, _ := md["namespace"].(string); ns != "" {
		key += ns + "/"
	}
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return key + md["name"].(string), string(raw)
}

// cniDatastore: Calico's etcd, through a relay into the node's
// namespace.
func (e *etcdLive) cniDatastore(t *testing.T, node string) map[string]any {
	return map[string]any{"datastore_type": "etcdv3", "etcd_endpoints": "http://" + e.relay(t, node)}
}

// relay is Calico's etcd's address inside a lab namespace.
func (e *etcdLive) relay(t *testing.T, netnsName string) string {
	if e.relays[netnsName] == "" {
		e.relays[netnsName] = labRelay(t, netnsName, strings.TrimPrefix(e.endpoint, "http://"))
	}
	return e.relays[netnsName]
}

// affinities reads each node's confirmed blocks from Calico's etcd
// (/calico/ipam/v2/host/<node>/ipv4/block/<cidr>), as calico-node's
// confd reads them.
func (e *etcdLive) affinities(ctx context.Context, t *testing.T) map[string][]netip.Prefix {
	t.Helper()
	const prefix = "/calico/ipam/v2/host/"
	resp, err := e.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]netip.Prefix{}
	for _, x := range resp.Kvs {
		parts := strings.Split(strings.TrimPrefix(string(x.Key), prefix), "/")
		var a struct{ State string }
		if err := json.Unmarshal(x.Value, &a); err != nil || len(parts) != 4 || parts[1] != "ipv4" {
			t.Fatalf("Calico's affinity %s: %v %s", x.Key, err, x.Value)
		}
		if a.State == "confirmed" {
			blocks[parts[0]] = append(blocks[parts[0]], netip.MustParsePrefix(strings.Replace(parts[3], "-", "/", 1)))
		}
	}
	return blocks
}

// freeze disables Calico's pool in its etcd, as `calicoctl patch ippool
// default-ipv4-ippool -p '{"spec":{"disabled":true}}'` does.
func (e *etcdLive) freeze(ctx context.Context, t *testing.T) {
	t.Helper()
	const key = "/calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool"
	resp, err := e.cli.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("Calico's pool: %v %v", err, resp)
	}
	var pool map[string]any
	if err := json.Unmarshal(resp.Kvs[0].Value, &pool); err != nil {
		t.Fatal(err)
	}
	pool["spec"].(map[string]any)["disabled"] = true
	raw, _ := json.Marshal(pool)
	if _, err := e.cli.Put(ctx, key, string(raw)); err != nil {
		t.Fatalf("freezing Calico's pool: %v", err)
	}
}

// from: Calico's etcd, through a relay into the router namespace.
func (e *etcdLive) from(t *testing.T, l *lab.Lab, _ string) []string {
	return []string{"--from-etcd", "http://" + e.relay(t, l.Topo.RouterNS())}
}

// felixDatastore: Calico's etcd, through the node's relay (the one
// Calico's CNI plugin uses there).
func (e *etcdLive) felixDatastore(t *testing.T, node, _ string) []string {
	return etcdFelix("http://" + e.relay(t, node))
}
