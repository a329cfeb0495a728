package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/lab"
)

// calicoFelixDir is where buildCalicoFelix caches felix and the CRDs of
// the same release.
func calicoFelixDir() string {
	return filepath.Join(kubeapiserver.CacheDir(), "calico-felix", "v3.31.0")
}

// calicoSource assembles Calico's source tree (calicoModules, as
// buildCalicoCNI does) in a temporary directory and returns it.
func calicoSource(ctx context.Context, t *testing.T, env []string) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "calico")
	for _, m := range calicoModules {
		cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", m.path+"@"+m.version)
		cmd.Env, cmd.Dir = env, t.TempDir()
		b, err := cmd.Output()
		var info struct{ Dir, Sum, Error string }
		if jerr := json.Unmarshal(b, &info); err != nil || jerr != nil || info.Error != "" {
			t.Fatalf("go mod download %s@%s: %v %v %s", m.path, m.version, err, jerr, info.Error)
		}
		if info.Sum != m.sum {
			t.Fatalf("%s@%s: hash %s, pinned %s", m.path, m.version, info.Sum, m.sum)
		}
		dst := filepath.Join(src, m.dir)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.CommandContext(ctx, "cp", "-r", info.Dir+"/.", dst+"/").CombinedOutput(); err != nil {
			t.Fatalf("copy %s: %v %s", m.path, err, out)
		}
		if out, err := exec.CommandContext(ctx, "chmod", "-R", "u+w", dst).CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	}
	// A module Calico's go.mod replaces with a directory that neither
	// binary imports and the proxy does not serve.
	stub := filepath.Join(src, "lib", "httpmachinery")
	if err := os.MkdirAll(stub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stub, "go.mod"), []byte("module github.com/projectcalico/calico/lib/httpmachinery\n\ngo 1.24\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return src
}

// buildCalicoFelix builds Calico's felix (v3.31.0, the release of
// buildCalicoCNI's plugin) once into the test cache, with the CRDs of
// that release next to it (crds/: felix watches more kinds than the
// migration reads), and returns the binary's path. cgo is off: the BPF
// dataplane, which needs libbpf, is then compiled out by Calico's own
// build tags, and the nftables and iptables dataplanes are pure Go
// (about 4 minutes with a cold module cache).
func buildCalicoFelix(t *testing.T) string {
	t.Helper()
	dir := calicoFelixDir()
	out := filepath.Join(dir, "calico-felix")
	if _, err := os.Stat(out); err == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	env := append(os.Environ(), "GONOSUMDB=github.com/projectcalico", "GOFLAGS=-mod=mod", "CGO_ENABLED=0")
	src := calicoSource(ctx, t, env)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	crds := filepath.Join(dir, "crds")
	if err := os.RemoveAll(crds); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.CommandContext(ctx, "cp", "-r", filepath.Join(src, "libcalico-go", "config", "crd"), crds).CombinedOutput(); err != nil {
		t.Fatalf("copy Calico's CRDs: %v %s", err, b)
	}
	tmp := out + fmt.Sprintf(".%d", os.Getpid())
	t.Logf("building Calico's felix (v3.31.0) into %s", out)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, "./felix/cmd/calico-felix")
	cmd.Env, cmd.Dir = env, src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building Calico's felix: %v\n%s", err, b)
	}
	t.Logf("built Calico's felix in %s", time.Since(start).Round(time.Second))
	if err := os.Rename(tmp, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// installFelixCRDs adds to a server that startCalicoKDD set up the
// CRDs of the kinds felix lists and the migration does not read
// (FelixConfiguration, the staged policies, the Kubernetes admin
// network policies): felix is not in sync until every list succeeds.
func installFelixCRDs(t *testing.T, srv *kubeapiserver.Server) {
	t.Helper()
	args := []string{"create"}
	for _, f := range felixCRDFiles(t) {
		args = append(args, "-f", f)
	}
	if out, errOut, err := kubectl(t, srv, args...); err != nil {
		t.Fatalf("installing felix's CRDs: %v\n%s%s", err, out, errOut)
	}
	if out, errOut, err := kubectl(t, srv, "wait", "--for=condition=Established", "--timeout=90s", "crd", "--all"); err != nil {
		t.Fatalf("felix's CRDs not established: %v\n%s%s", err, out, errOut)
	}
}

// felixCRDFiles are the CRDs of Calico's source tree (calicoFelixDir)
// that testdata/calico-crds lacks.
func felixCRDFiles(t *testing.T) []string {
	t.Helper()
	have, err := os.ReadDir(filepath.Join("testdata", "calico-crds"))
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	for _, f := range have {
		installed[f.Name()] = true
	}
	all, err := filepath.Glob(filepath.Join(calicoFelixDir(), "crds", "*.yaml"))
	if err != nil || len(all) == 0 {
		t.Fatalf("Calico's CRDs in %s: %v", calicoFelixDir(), err)
	}
	var files []string
	for _, f := range all {
		if !installed[filepath.Base(f)] {
			files = append(files, f)
		}
	}
	return files
}

// calicoFelix is Calico's felix running as one node's felix.
type calicoFelix struct {
	mode   felixMode
	netns  string // the node's network namespace
	kept   string // in iptables mode, iptablesSave before felix started
	kept6  string // the same of ip6tables, with IPv6 on
	log    string
	proc   *os.Process   // felix itself: nsenter, unshare and sh exec it
	exited chan struct{} // closed when felix has exited
	health *http.Client
}

// startCalicoFelix runs felix as node's felix in the network namespace
// node (on the datastore that datastore, from kddFelix or etcdFelix,
// names; the dataplane mode, BPF off) until the test ends. In iptables
// mode the node's iptables first get what a kubelet writes (kubeletChains). Felix writes
// outside its network namespace
// (/var/lib/calico/mtu, /var/run/calico, /run/xtables.lock), so it runs
// in a mount namespace of its own with empty /var/lib and /run, and the
// node namespace's sysfs. It logs to dir/felix-<node>.log.
func startCalicoFelix(t *testing.T, bin string, node ns.NetNS, nodeName string, mode felixMode, datastore []string, dir string) *calicoFelix {
	t.Helper()
	// Felix's dataplane shells out to nft, ipset (in nftables mode too,
	// to remove what an iptables-mode felix left) and iptables' save and
	// restore of either backend (to choose one, and to remove what a
	// felix of the other mode left); calico-node's image ships them all.
	for tool, pkg := range map[string]string{"nft": "nftables", "ipset": "ipset", "iptables-nft-restore": "iptables", "iptables-legacy-save": "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (Calico's felix runs it): apt-get install %s", tool, pkg)
		}
	}
	f := &calicoFelix{mode: mode, netns: node.Path(), log: filepath.Join(dir, "felix-"+nodeName+".log"), exited: make(chan struct{})}
	if mode.iptables {
		f.kept = kubeletChains(t, node.Path(), mode.backend)
		if mode.ipv6 {
			f.kept6 = iptablesSave(t, node.Path(), mode.save6())
		}
	}
	logf, err := os.Create(f.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", "--net="+node.Path(), "unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs felix /var/lib && mount -t tmpfs felix /run && mount -t sysfs sysfs /sys && mkdir /run/calico && exec "$0"`, bin)
	env := append([]string{"PATH=" + os.Getenv("PATH"), "FELIX_FELIXHOSTNAME=" + nodeName,
		"FELIX_BPFENABLED=false", "FELIX_IPV6SUPPORT=false", "FELIX_XDPENABLED=false",
		"FELIX_HEALTHENABLED=true", "FELIX_HEALTHHOST=127.0.0.1", "FELIX_HEALTHPORT=9099",
		"FELIX_LOGFILEPATH=none", "FELIX_LOGSEVERITYSCREEN=Info", "FELIX_USAGEREPORTINGENABLED=false",
		"FELIX_LOGSEVERITYSYS=none", "FELIX_DEFAULTENDPOINTTOHOSTACTION=ACCEPT",
		// With BPF off felix still removes BPF's connect-time load
		// balancer at start, through libbpf, which a build without cgo
		// has only as a stub that panics; Calico's own tests skip it so.
		"FELIX_DebugSkipCTLBCleanup=true"}, mode.env...)
	cmd.Env = append(env, datastore...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.proc = cmd.Process
	go func() { _ = cmd.Wait(); close(f.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-f.exited
		if t.Failed() {
			b, _ := os.ReadFile(f.log)
			t.Logf("---- felix on %s (tail)\n%s", nodeName, tail(string(b), 80))
		}
	})
	f.health = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			derr := node.Do(func(ns.NetNS) error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return nil
			})
			if derr != nil {
				return nil, derr
			}
			return c, err
		}}}
	return f
}

// kddFelix is felix's environment for the Kubernetes datastore, the
// API server reached through kubeconfig.
func kddFelix(kubeconfig string) []string {
	return []string{"KUBECONFIG=" + kubeconfig, "DATASTORE_TYPE=kubernetes", "FELIX_DATASTORETYPE=kubernetes"}
}

// etcdFelix is felix's environment for the etcd datastore at endpoint
// (a URL): calico-node's ETCD_ENDPOINTS (Calico's calico-etcd.yaml sets
// it) and felix's own names for the same.
func etcdFelix(endpoint string) []string {
	return []string{"DATASTORE_TYPE=etcdv3", "ETCD_ENDPOINTS=" + endpoint, "FELIX_DATASTORETYPE=etcdv3", "FELIX_ETCDENDPOINTS=" + endpoint}
}

// stop ends felix as the kubelet ends calico-node's container (SIGTERM)
// and waits until it has exited. Felix leaves its dataplane (its
// nftables tables, its routes) as it was.
func (f *calicoFelix) stop(t *testing.T) {
	t.Helper()
	if err := f.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stopping felix: %v", err)
	}
	select {
	case <-f.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("felix still running 10 s after SIGTERM (log %s)", f.log)
	}
}

// waitReady waits for felix's readiness report (in sync with the
// datastore, dataplane programmed).
func (f *calicoFelix) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	testenv.Eventually(t, timeout, 500*time.Millisecond, func() string {
		select {
		case <-f.exited:
			t.Fatalf("felix exited (log %s)", f.log)
		default:
		}
		resp, err := f.health.Get("http://127.0.0.1:9099/readiness")
		if err != nil {
			return fmt.Sprintf("felix readiness: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Sprintf("felix readiness: %s", resp.Status)
		}
		return ""
	})
}

// Ports of TestCalicoFelixEnforcesOnKDD's server pod.
const (
	felixOpen      = 8080 // allowed by the GlobalNetworkPolicy's last rule
	felixGNPDenied = 8081 // denied to all by the GlobalNetworkPolicy
	felixNPDenied  = 8082 // denied to the client by the NetworkPolicy
)

// TestCalicoFelixEnforcesOnKDD runs Calico's own felix (v3.31.0, built
// from source, nftables mode: felixEnforcesOnKDD) as the felix of one node on the
// Kubernetes datastore, with two pods that Calico's CNI plugin set up
// on that node. Without policy the client reaches the server on every
// port (felix programmed both endpoints under their namespace's
// profile); with Calico's GlobalNetworkPolicy (deny one port, allow the
// rest) and NetworkPolicy (deny one port from the client) in place,
// both denied ports stop answering while the open one still connects,
// and deleting the NetworkPolicy opens its port again. The verdicts are
// felix's: the node namespace has no other rules.
func TestCalicoFelixEnforcesOnKDD(t *testing.T) {
	felixEnforcesOnKDD(t, felixNFTables)
}

// felixEnforcesOnKDD is TestCalicoFelixEnforcesOnKDD with felix in mode.
func felixEnforcesOnKDD(t *testing.T, mode felixMode) {
	requireRoot(t)
	felix := buildCalicoFelix(t)
	calico := buildCalicoCNI(t)
	srv, rc := startCalicoKDD(t, "calico-crds")
	installFelixCRDs(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kube := kubernetes.NewForConfigOrDie(rc)
	const nodeName, podNS = "node-f", "fx"

	crd := func(kind, meta, spec string) string {
		return fmt.Sprintf("apiVersion: crd.projectcalico.org/v1\nkind: %s\nmetadata: %s\nspec: %s\n", kind, meta, spec)
	}
	docs := []string{
		crd("IPPool", "{name: default-ipv4-ippool}", "{cidr: 10.247.0.0/16, ipipMode: Never, vxlanMode: Never, natOutgoing: false, blockSize: 26, nodeSelector: all()}"),
		crd("ClusterInformation", "{name: default}", `{clusterGUID: 9c1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a, clusterType: "k8s,kdd", calicoVersion: v3.31.0, datastoreReady: true}`),
	}
	nodeAnnotations := map[string]string{"projectcalico.org/IPv4Address": "10.0.0.41/24"}
	cniConf := map[string]any{"datastore_type": "kubernetes"}
	if mode.ipv6 {
		docs = append(docs, crd("IPPool", "{name: default-ipv6-ippool}", "{cidr: 'fd5e:247::/48', ipipMode: Never, vxlanMode: Never, natOutgoing: false, blockSize: 122, nodeSelector: all()}"))
		nodeAnnotations["projectcalico.org/IPv6Address"] = "fd00:41::41/64"
		cniConf["ipam"] = map[string]string{"type": "calico-ipam", "assign_ipv4": "true", "assign_ipv6": "true"}
	}
	for _, tier := range []struct{ name, order, action string }{{"kube-admin", "1000", "Pass"}, {"default", "1000000", "Deny"}, {"kube-baseline", "10000000", "Pass"}} {
		docs = append(docs, crd("Tier", "{name: "+tier.name+"}", "{order: "+tier.order+", defaultAction: "+tier.action+"}"))
	}
	kubectlCreate(t, srv, strings.Join(docs, "---\n"))
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName,
		Labels:      map[string]string{"kubernetes.io/hostname": nodeName},
		Annotations: nodeAnnotations}}, metav1.CreateOptions{}))
	must(kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: podNS}}, metav1.CreateOptions{}))
	must(kube.CoreV1().ServiceAccounts(podNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))

	// The node: its namespace forwards, has an uplink (a dummy eth0
	// with the node's address) and a default route through it, as a
	// Kubernetes node does: the pods' gateway 169.254.1.1 is answered by
	// proxy ARP on their cali devices only when the node has a route to
	// it. It reaches the API server on its loopback.
	node := newNetNS(t)
	if err := node.Do(func(ns.NetNS) error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		// A veth whose peer stays here too: the kernel may lack dummy.
		uplink := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}
		if err := netlink.LinkAdd(uplink); err != nil {
			return err
		}
		peer, err := netlink.LinkByName("eth0-peer")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(peer); err != nil {
			return err
		}
		addr, _ := netlink.ParseAddr("10.0.0.41/24")
		if err := netlink.AddrAdd(uplink, addr); err != nil {
			return err
		}
		if err := netlink.LinkSetUp(uplink); err != nil {
			return err
		}
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: uplink.Attrs().Index, Gw: net.ParseIP("10.0.0.1")}); err != nil {
			return err
		}
		if mode.ipv6 {
			// The same for IPv6: the pods' gateway, felix's link-local
			// address on their cali devices, answers once the node
			// forwards and has a default route.
			addr6, _ := netlink.ParseAddr("fd00:41::41/64")
			addr6.Flags = unix.IFA_F_NODAD
			if err := netlink.AddrAdd(uplink, addr6); err != nil {
				return err
			}
			if err := netlink.RouteAdd(&netlink.Route{LinkIndex: uplink.Attrs().Index, Gw: net.ParseIP("fd00:41::1")}); err != nil {
				return err
			}
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
				return err
			}
		}
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, nodeName+".kubeconfig")
	if err := os.WriteFile(kubeconfig, srv.Kubeconfig("https://"+newRelay(t, node, strings.TrimPrefix(srv.URL, "https://")), srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := calicoBinDir(t, calico, dir)
	server := &calicoPod{ns: podNS, name: "srv-1", node: nodeName, cid: "fe11c0ffee01", nodeNS: node.Path()}
	client := &calicoPod{ns: podNS, name: "cli-1", node: nodeName, cid: "fe11c0ffee02", nodeNS: node.Path()}
	podNets := map[*calicoPod]ns.NetNS{}
	for _, p := range []*calicoPod{server, client} {
		createPod(ctx, t, kube, p)
		podNets[p] = newNetNS(t)
		calicoCNIAdd(ctx, t, bin, dir, kubeconfig, cniConf, p, podNets[p].Path())
		if mode.ipv6 && p.ip6 == "" {
			t.Fatalf("Calico's CNI gave %s no IPv6 address", p.name)
		}
		reportPodIP(ctx, t, kube, p)
	}
	// The pods as the lab's probes know them (by netns name).
	srvPod := lab.Pod{Name: server.name, NS: filepath.Base(podNets[server].Path()), IP: server.ip, IP6: server.ip6}
	cliPod := lab.Pod{Name: client.name, NS: filepath.Base(podNets[client].Path()), IP: client.ip, IP6: client.ip6}
	srvAddrs := []string{srvPod.IP}
	for _, port := range []int{felixOpen, felixGNPDenied, felixNPDenied} {
		if err := lab.TCPListen(ctx, srvPod, port); err != nil {
			t.Fatal(err)
		}
		if mode.ipv6 {
			if err := lab.TCPListen6(ctx, srvPod, port); err != nil {
				t.Fatal(err)
			}
		}
	}
	if mode.ipv6 {
		srvAddrs = append(srvAddrs, srvPod.IP6)
	}

	f := startCalicoFelix(t, felix, node, nodeName, mode, kddFelix(kubeconfig), dir)
	start := time.Now()
	f.waitReady(t, 2*time.Minute)
	t.Logf("felix ready after %s", time.Since(start).Round(time.Millisecond))
	f.checkProgrammed(t)

	// connects: the client reaches the server's port on every address
	// (IPv4, and IPv6 when dual-stack); connectsAny: on one of them.
	count := func(port int, timeout time.Duration) int {
		n := 0
		for _, addr := range srvAddrs {
			ok, err := lab.TCPConnects(cliPod, addr, port, timeout)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				n++
			}
		}
		return n
	}
	connects := func(port int, timeout time.Duration) bool { return count(port, timeout) == len(srvAddrs) }
	// which names the addresses the client reaches port on, and not.
	which := func(port int) string {
		var out []string
		for _, addr := range srvAddrs {
			ok, _ := lab.TCPConnects(cliPod, addr, port, time.Second)
			out = append(out, fmt.Sprintf("[%s]:%d %v", addr, port, ok))
		}
		return strings.Join(out, ", ")
	}
	connectsAny := func(port int, timeout time.Duration) bool { return count(port, timeout) > 0 }
	reachAll := func(ports ...int) func() string {
		return func() string {
			for _, port := range ports {
				if !connects(port, 500*time.Millisecond) {
					return fmt.Sprintf("%s cannot reach %s %s:%d", client.name, server.name, server.ip, port)
				}
			}
			return ""
		}
	}
	testenv.Eventually(t, time.Minute, 200*time.Millisecond, reachAll(felixOpen, felixGNPDenied, felixNPDenied))
	t.Logf("without policy %s reaches %s on every port", client.name, server.name)

	stored := func(name string) string {
		return fmt.Sprintf(`name: default.%s, annotations: {projectcalico.org/metadata: '{"name":"%s"}'}`, name, name)
	}
	kubectlCreate(t, srv, strings.Join([]string{
		crd("GlobalNetworkPolicy", "{"+stored(fmt.Sprintf("deny-tcp-%d", felixGNPDenied))+"}",
			fmt.Sprintf("{order: 100, selector: \"app == 'srv-1'\", types: [Ingress], ingress: [{action: Deny, protocol: TCP, destination: {ports: [%d]}}, {action: Allow}]}", felixGNPDenied)),
		crd("NetworkPolicy", "{"+stored("srv-1-not-from-cli")+", namespace: "+podNS+"}",
			fmt.Sprintf("{order: 10, selector: \"app == 'srv-1'\", types: [Ingress], ingress: [{action: Deny, protocol: TCP, source: {selector: \"app == 'cli-1'\"}, destination: {ports: [%d]}}]}", felixNPDenied)),
	}, "---\n"))
	start = time.Now()
	testenv.Eventually(t, time.Minute, 200*time.Millisecond, func() string {
		for _, port := range []int{felixGNPDenied, felixNPDenied} {
			if connectsAny(port, 300*time.Millisecond) {
				return fmt.Sprintf("%s still reaches %s:%d", client.name, server.name, port)
			}
		}
		return ""
	})
	t.Logf("felix enforces both policies %s after they were created", time.Since(start).Round(time.Millisecond))
	if !connects(felixOpen, 2*time.Second) {
		t.Fatalf("%s cannot reach %s:%d, which the policies allow (%s)", client.name, server.name, felixOpen, which(felixOpen))
	}

	// The NetworkPolicy gone, the GlobalNetworkPolicy's allow-the-rest
	// opens its port again while its deny holds.
	if out, errOut, err := kubectl(t, srv, "delete", "-n", podNS, "networkpolicies.crd.projectcalico.org", "default.srv-1-not-from-cli"); err != nil {
		t.Fatalf("%v\n%s%s", err, out, errOut)
	}
	testenv.Eventually(t, time.Minute, 200*time.Millisecond, reachAll(felixOpen, felixNPDenied))
	if connectsAny(felixGNPDenied, 2*time.Second) {
		t.Fatalf("%s reaches %s:%d, which the GlobalNetworkPolicy still denies", client.name, server.name, felixGNPDenied)
	}
	if mode.iptables {
		// What felix leaves when it stops, and the doc's clean-up.
		f.stop(t)
		if connectsAny(felixGNPDenied, 2*time.Second) {
			t.Fatalf("%s reaches %s:%d once felix stopped: it took its rules with it", client.name, server.name, felixGNPDenied)
		}
		f.clearIptables(t)
		if !connects(felixGNPDenied, 2*time.Second) {
			t.Fatalf("%s cannot reach %s:%d with Calico's rules removed", client.name, server.name, felixGNPDenied)
		}
	}
}
