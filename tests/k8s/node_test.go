package k8s_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/tests/cnitest"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/testbin"
)

// The helpers tests/cni shares, under the names these tests use.
var (
	newNetNS = cnitest.NewNetNS
	cniCode  = cnitest.Code
	randHex  = cnitest.RandHex
)

// node is a Kubernetes node as far as the CNI plugin can tell: a fresh
// network namespace with loopback relays to a routed etcd and to the API
// server (as a node reaches them), CNI directories filled by the real
// installer from the DaemonSet's init container spec, and a libcni
// runtime running the plugins inside the namespace. A minimal version of
// tests/cni's harness; what both need is in tests/cnitest.
type node struct {
	t      *testing.T
	name   string
	hostNS ns.NetNS
	store  *datastore.Client
	// apiAddr is the API server as seen from the node (a relay).
	apiAddr string
	etcdEP  string
	binDir  string // the node's /opt/cni/bin
	netDir  string // the node's /etc/cni/net.d
	logFile string
	cni     *libcni.CNIConfig
	path    []string
}

func newNode(t *testing.T, srv *kubeapiserver.Server) *node {
	t.Helper()
	requireRoot(t)
	n := &node{t: t, name: "k8s-node-" + randHex(3)}
	etcd := etcdtest.Start(t)
	n.hostNS = newNetNS(t)
	if err := n.hostNS.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	}); err != nil {
		t.Fatal(err)
	}
	n.etcdEP = "http://" + newRelay(t, n.hostNS, strings.TrimPrefix(etcd.Endpoints[0], "http://"))
	n.apiAddr = newRelay(t, n.hostNS, strings.TrimPrefix(srv.URL, "https://"))
	var err error
	if n.store, err = datastore.New(datastore.Config{Endpoints: etcd.Endpoints}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.store.Close() })
	n.binDir, n.netDir = t.TempDir(), t.TempDir()
	n.logFile = filepath.Join(t.TempDir(), "cni.log")
	return n
}

// install runs `routed-cni install` the way the routed-node DaemonSet's
// init container does: its environment from deploy/routed.yaml, values
// from routed-config, paths mapped from the container's mounts to this
// node's directories. Only ETCD_ENDPOINTS (a placeholder in the manifest) and the Kubernetes
// service address (which kubelet sets) are the test's.
func (n *node) install() {
	t := n.t
	t.Helper()
	objs := readDocs(t, deployPath("routed.yaml"))
	cm := asMap(find(t, objs, "ConfigMap", "routed-config")["data"])
	ds := find(t, objs, "DaemonSet", "routed-node")
	var ic map[string]any
	for _, c := range containers(podSpec(ds)) {
		if c["name"] == "install-cni" {
			ic = c
		}
	}
	if ic == nil {
		t.Fatal("routed-node has no install-cni init container")
	}

	// The image's and the host's directories, as this node has them.
	src := t.TempDir()
	for _, b := range []string{"routed-cni", "routed-ipam", "routed-cni-full", "routed-ipam-full"} {
		copyFile(t, testbin.Path(t, b), filepath.Join(src, b))
	}
	secretsDir := t.TempDir()
	paths := map[string]string{
		"/host/opt/cni/bin":        n.binDir,
		"/host/etc/cni/net.d":      n.netDir,
		"/etc/routed/etcd-secrets": secretsDir,
		"/opt/cni/bin":             src, // the image's plugins (CNI_SOURCE_DIR)
		"/etc/cni/net.d":           n.netDir,
	}
	for _, m := range list(ic["volumeMounts"]) {
		if _, ok := paths[str(asMap(m)["mountPath"])]; !ok {
			t.Fatalf("install-cni mounts %v, which this test does not map", asMap(m)["mountPath"])
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH"),
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=" + portOf(n.apiAddr)}
	for _, e := range list(ic["env"]) {
		em := asMap(e)
		name, val := str(em["name"]), str(em["value"])
		if ref := asMap(asMap(em["valueFrom"])["configMapKeyRef"]); ref != nil {
			val = str(cm[str(ref["key"])])
		}
		if f := asMap(asMap(em["valueFrom"])["fieldRef"]); f != nil {
			if f["fieldPath"] != "spec.nodeName" {
				t.Fatalf("install-cni env %s: fieldRef %v not mapped", name, f["fieldPath"])
			}
			val = n.name
		}
		if p, ok := paths[val]; ok {
			val = p
		}
		if name == "ETCD_ENDPOINTS" {
			val = n.etcdEP
		}
		env = append(env, name+"="+val)
	}
	cmd := exec.Command(filepath.Join(src, "routed-cni"), "install")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("routed-cni install: %v\n%s", err, out)
	}

	// What the runtime runs: the installed plugins, then the reference
	// portmap and bandwidth the conflist chains (the image ships them;
	// here they come from tests/ensure-deps.sh).
	n.path = []string{n.binDir, refBinDir(t)}
	n.cni = libcni.NewCNIConfigWithCacheDir(n.path, t.TempDir(),
		&invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}})
}

// conflist returns the installed configuration with the test's log
// file and host IPAM lock, no MTU file, routed-ipam limited to pool-a (so that pool
// annotations visibly override it) and, when kubeconfig is set, another
// kubeconfig.
func (n *node) conflist(kubeconfig string) *libcni.NetworkConfigList {
	t := n.t
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.netDir, "10-routed.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	var l map[string]any
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	p := asMap(list(l["plugins"])[0])
	if got, want := str(asMap(p["kubernetes"])["kubeconfig"]), filepath.Join(n.netDir, "routed-kubeconfig"); got != want {
		t.Fatalf("installed conflist: kubernetes.kubeconfig %q, want %q", got, want)
	}
	if p["nodename"] != n.name || p["etcd_endpoints"] != n.etcdEP {
		t.Fatalf("installed conflist: nodename %v etcd_endpoints %v", p["nodename"], p["etcd_endpoints"])
	}
	p["log_file_path"] = n.logFile
	p["log_level"] = "debug"
	// The host IPAM lock of a node of its own, not this machine's
	// /var/run/routed/ipam.lock: that is the k8s clusters' first node's
	// (its hostPath), which checks it is left empty after an uninstall.
	p["ipam_lock_file"] = filepath.Join(filepath.Dir(n.logFile), "ipam.lock")
	// No felix runs on these test nodes: do not wait for it to program
	// policy (the shipped 30 s wait is checked by the two-node cluster).
	p["policy_setup_timeout_seconds"] = 0
	p["mtu_file"] = filepath.Join(n.netDir, "no-mtu-file")
	asMap(p["ipam"])["ipv4_pools"] = []string{"pool-a"}
	if kubeconfig != "" {
		asMap(p["kubernetes"])["kubeconfig"] = kubeconfig
	}
	b, _ = json.Marshal(l)
	cl, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, b)
	}
	return cl
}

func (n *node) createPool(name, cidr string) {
	n.t.Helper()
	p := &api.IPPool{TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindIPPool},
		Metadata: api.ObjectMeta{Name: name}, Spec: api.IPPoolSpec{CIDR: cidr, BlockSize: 26}}
	if _, err := n.store.Create(context.Background(), p); err != nil {
		n.t.Fatal(err)
	}
}

// sandbox is one pod sandbox: a netns and its CNI identity.
type sandbox struct {
	namespace, pod, containerID string
	netns                       ns.NetNS
}

func (n *node) sandbox(namespace, pod string) *sandbox {
	return &sandbox{namespace: namespace, pod: pod, containerID: randHex(16), netns: newNetNS(n.t)}
}

func (s *sandbox) rt() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: s.containerID, NetNS: s.netns.Path(), IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", s.namespace}, {"K8S_POD_NAME", s.pod}, {"K8S_POD_INFRA_CONTAINER_ID", s.containerID}}}
}

func (n *node) add(l *libcni.NetworkConfigList, s *sandbox) (types.Result, error) {
	var res types.Result
	err := n.hostNS.Do(func(ns.NetNS) error {
		var err error
		res, err = n.cni.AddNetworkList(context.Background(), l, s.rt())
		return err
	})
	return res, err
}

func (n *node) del(l *libcni.NetworkConfigList, s *sandbox) error {
	return n.hostNS.Do(func(ns.NetNS) error { return n.cni.DelNetworkList(context.Background(), l, s.rt()) })
}

func (n *node) logTail() string { return cnitest.LogTail(n.logFile) }

// endpoints maps pod name to its WorkloadEndpoint.
func (n *node) endpoints() map[string]*api.WorkloadEndpoint {
	n.t.Helper()
	rs, _, err := n.store.List(context.Background(), api.KindWorkloadEndpoint)
	if err != nil {
		n.t.Fatal(err)
	}
	out := map[string]*api.WorkloadEndpoint{}
	for _, r := range rs {
		w := r.(*api.WorkloadEndpoint)
		out[w.Spec.Pod] = w
	}
	return out
}

// inUse counts allocated addresses.
func (n *node) inUse() int {
	n.t.Helper()
	u, err := ipam.New(n.store).Usage(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	total := 0
	for _, p := range u.Pools {
		total += p.InUse
	}
	return total
}

// caliLinks lists the node's host-side pod interfaces.
func (n *node) caliLinks() []string {
	names, _ := cnitest.CaliLinks(n.hostNS)
	return names
}

// refBinDir holds the reference plugins tests/ensure-deps.sh installs.
func refBinDir(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env GOPATH: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "bin")
	for _, p := range []string{"portmap", "bandwidth"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("%s missing in %s: run `make deps` (tests/ensure-deps.sh)", p, dir)
		}
	}
	return dir
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// newRelay listens on 127.0.0.1 inside netns and relays each connection
// to target on the test process's loopback (cnitest.Relay): how the node
// reaches etcd and the API server. It returns the listening address.
func newRelay(t testing.TB, in ns.NetNS, target string) string {
	t.Helper()
	return cnitest.NewRelay(t, in, target).Addr
}
