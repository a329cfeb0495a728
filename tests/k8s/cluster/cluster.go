// Package cluster runs a real Kubernetes cluster of one or two nodes on
// this machine for routed's tests and `make k8s-demo`: etcd (`routed
// etcd`), kube-apiserver, kube-controller-manager and kube-scheduler in
// the test's network namespace; per node, containerd (Debian's, CRI
// plugin), kubelet and kube-proxy in a node network namespace, the
// nodes and the host on one bridge (one L2 subnet). Pods, routed's
// DaemonSet among them, run in their node's namespace (hostNetwork
// pods) or their own. The first node's CNI directories are the host's
// /opt/cni/bin and /etc/cni/net.d, where routed's install-cni puts its
// files; the second node runs in a mount namespace of its own where
// those and routed's other host paths (HostPaths) are per-node
// directories (Node.Root), so two nodes on one machine do not share
// them, as two machines would not. No registry is reachable: the pause
// and busybox images are built locally (internal/ociimage) and imported
// into every node's containerd.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/routed-net/routed/internal/ociimage"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// Images the cluster imports into containerd before kubelet starts.
const (
	PauseImage   = "registry.k8s.io/pause:3.10"
	BusyboxImage = "docker.io/library/busybox:routed-test"
)

// HostPaths are where routed's DaemonSet writes on the node's host
// (hostPath volumes): install-cni's files and routed's state.
var HostPaths = []string{
	"/etc/cni/net.d/10-routed.conflist", "/etc/cni/net.d/routed-kubeconfig", "/etc/cni/net.d/routed-tls",
	"/opt/cni/bin/routed-cni", "/opt/cni/bin/routed-ipam", "/opt/cni/bin/routed-cni-full", "/opt/cni/bin/routed-ipam-full",
	"/var/lib/routed", "/var/run/routed", "/var/log/routed",
}

// NodePaths are the host paths a node's containers write through
// hostPath volumes: HostPaths' directories, and kubelet's pod logs. The
// second node gets its own copy of each (bind mounts in its mount
// namespace).
var NodePaths = []string{"/etc/cni/net.d", "/opt/cni/bin", "/var/lib/routed", "/var/run/routed", "/var/log/routed", "/var/log/pods", "/var/log/containers"}

// Config says where and how to run the cluster.
type Config struct {
	// Dir holds every component's state and log.
	Dir string
	// Prefix names the node namespace (<prefix>-node, also the node's
	// name) and the host-side veth (<prefix>-h).
	Prefix string
	// Subnet joins the host (.1: etcd, kube-apiserver) and the nodes (.2,
	// .3).
	Subnet netip.Prefix
	// Nodes is 1 (the default) or 2.
	Nodes int
	// Routed is the routed binary (`routed etcd`).
	Routed string
	// KubeAPIServer and KubeNode are the Kubernetes binaries
	// (kubeapiserver.Build, BuildNode).
	KubeAPIServer, KubeNode string
	Logf                    func(string, ...any)
}

// Node is one of the cluster's nodes.
type Node struct {
	Name string // Kubernetes node name, also its network namespace
	Addr netip.Addr
	// Containerd is the node's containerd socket.
	Containerd string
	// Root, for a node in a mount namespace of its own, is the directory
	// standing in for / under NodePaths: Root+"/etc/cni/net.d" is what
	// the node's /etc/cni/net.d holds. Empty for the first node, whose
	// paths are the host's.
	Root string
	// mnt is the node's mount namespace (bind-mounted file), or "".
	mnt string
	// suffix tells the node's files in Dir apart ("" for the first).
	suffix string
}

// HostPath is where path (one of NodePaths or below) is on this machine
// for the node.
func (n *Node) HostPath(path string) string { return n.Root + path }

// Cluster is a running cluster.
type Cluster struct {
	cfg    Config
	Node   string
	NodeNS string
	// Nodes are all the nodes; Nodes[0] is Node.
	Nodes    []*Node
	HostAddr netip.Addr
	NodeAddr netip.Addr
	// Etcd is the Kubernetes control plane's etcd endpoint (plain http).
	Etcd string
	// RoutedEtcd is routed's own etcd, over TLS with client certificates
	// (EtcdTLS: CA, server and client files), reachable from the nodes.
	RoutedEtcd string
	EtcdTLS    testpki.PKI
	API        *kubeapiserver.Server
	Kubeconfig string
	Containerd string // the first node's containerd socket
	procs      []*proc
}

// Up starts the cluster and waits until the node is registered. Call
// Down in every case (it also undoes a partial Up).
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, Node: cfg.Prefix + "-node", NodeNS: cfg.Prefix + "-node"}
	c.HostAddr = cfg.Subnet.Addr().Next()
	c.NodeAddr = c.HostAddr.Next()
	c.Containerd = c.path("containerd.sock")
	c.Nodes = []*Node{{Name: c.Node, Addr: c.NodeAddr, Containerd: c.Containerd}}
	if cfg.Nodes == 2 {
		c.Nodes = append(c.Nodes, &Node{Name: cfg.Prefix + "-node2", Addr: c.NodeAddr.Next(), Containerd: c.path("containerd2.sock"),
			Root: c.path("node2-root"), mnt: c.path("mnt/node2"), suffix: "2"})
	} else if cfg.Nodes > 2 {
		return c, fmt.Errorf("cluster: %d nodes: at most 2", cfg.Nodes)
	}
	Cleanup(cfg.Prefix, cfg.Dir)
	// A new cluster every time: no etcd data, containerd or kubelet
	// state from an earlier run.
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return c, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return c, err
	}
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"network", c.network},
		{"second node's mount namespace", c.mountNS},
		{"etcd", c.etcd},
		{"routed's etcd (TLS, client certificates)", c.routedEtcd},
		{"kube-apiserver", c.apiserver},
		{"kube-controller-manager and kube-scheduler", c.controlPlane},
		{"containerd", c.containerd},
		{"images", c.images},
		{"kubelet and kube-proxy", c.kubelet},
	}
	for _, s := range steps {
		cfg.Logf("cluster: %s", s.name)
		if err := s.f(ctx); err != nil {
			return c, fmt.Errorf("cluster %s: %w", s.name, err)
		}
	}
	return c, nil
}

// Down stops every process the cluster started, by PID, and removes its
// namespace. Safe after a partial Up and more than once.
func (c *Cluster) Down() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		c.procs[i].stop()
	}
	c.procs = nil
	if c.API != nil {
		c.API.Stop()
		c.API = nil
	}
	Cleanup(c.cfg.Prefix, c.cfg.Dir)
}

// Cleanup removes what an earlier cluster with this prefix left: its
// processes (from the pid file), the node namespace and the veth.
func Cleanup(prefix, dir string) {
	// The cluster's processes: those in the pid file; every process in
	// the node namespaces (pods' sandboxes, containerd-shim, live on there
	// after containerd is killed); and every descendant of those: the
	// pods' containers run in their own network namespaces as children
	// of their shim, and killing the shim alone leaves them to init. (A
	// pid file left by a crashed run may name reused PIDs: those are
	// killed alone, as before, never with their descendants.)
	var kill []int
	if b, err := os.ReadFile(filepath.Join(dir, "pids")); err == nil {
		kill = append(kill, pidsIn(string(b))...)
	}
	nodeNS := []string{prefix + "-node", prefix + "-node2"}
	var inNodes []int
	for _, ns := range nodeNS {
		if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
			inNodes = append(inNodes, pidsIn(string(out))...)
		}
	}
	kill = append(kill, withDescendants(inNodes)...)
	for _, pid := range kill {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = os.Remove(filepath.Join(dir, "pids"))
	for _, ns := range nodeNS {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	// The second node's mount namespace (its file, then the private
	// mount holding it).
	if dir != "" {
		_ = syscall.Unmount(filepath.Join(dir, "mnt", "node2"), syscall.MNT_DETACH)
		_ = syscall.Unmount(filepath.Join(dir, "mnt"), syscall.MNT_DETACH)
	}
	// What an earlier run's routed left on the host (hostPath volumes):
	// a node that remembers another cluster holds against this one.
	for _, p := range HostPaths {
		_ = os.RemoveAll(p)
	}
	for _, l := range []string{prefix + "-h", prefix + "-h2", prefix + "-br"} {
		_ = exec.Command("ip", "link", "del", l).Run()
	}
	// Mounts containerd and kubelet left (overlay snapshots, pod volumes).
	if b, err := os.ReadFile("/proc/self/mounts"); err == nil {
		var mounts []string
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && dir != "" && strings.HasPrefix(f[1], dir+"/") {
				mounts = append(mounts, f[1])
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = syscall.Unmount(mounts[i], syscall.MNT_DETACH)
		}
	}
}

// pidsIn parses whitespace-separated process IDs, leaving out init and
// anything that is not one.
func pidsIn(text string) []int {
	var out []int
	for _, f := range strings.Fields(text) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			out = append(out, pid)
		}
	}
	return out
}

// withDescendants returns roots and every process descended from them,
// read from /proc once (children are listed before they can be
// reparented: nothing is killed yet).
func withDescendants(roots []int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The fields after the command, which is in parentheses and may
		// hold spaces: state, then the parent's PID.
		rest := string(b)
		if i := strings.LastIndexByte(rest, ')'); i >= 0 {
			rest = rest[i+1:]
		}
		if f := strings.Fields(rest); len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil {
				children[ppid] = append(children[ppid], pid)
			}
		}
	}
	seen := map[int]bool{}
	var out []int
	for queue := append([]int(nil), roots...); len(queue) > 0; queue = queue[1:] {
		pid := queue[0]
		if seen[pid] || pid <= 1 {
			continue
		}
		seen[pid] = true
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) network(context.Context) error {
	bits := strconv.Itoa(c.cfg.Subnet.Bits())
	br := c.cfg.Prefix + "-br"
	cmds := [][]string{
		{"link", "add", br, "type", "bridge"},
		{"addr", "add", c.HostAddr.String() + "/" + bits, "dev", br},
		{"link", "set", br, "up"},
	}
	for _, n := range c.Nodes {
		host := c.cfg.Prefix + "-h" + n.suffix
		cmds = append(cmds, [][]string{
			{"netns", "add", n.Name},
			{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", n.Name},
			{"link", "set", host, "master", br},
			{"link", "set", host, "up"},
			{"-n", n.Name, "addr", "add", n.Addr.String() + "/" + bits, "dev", "eth0"},
			{"-n", n.Name, "link", "set", "eth0", "up"},
			{"-n", n.Name, "link", "set", "lo", "up"},
			{"-n", n.Name, "route", "add", "default", "via", c.HostAddr.String()},
		}...)
	}
	for _, args := range cmds {
		if err := ipCmd(args...); err != nil {
			return err
		}
	}
	return nil
}

// mountNS gives the second node a mount namespace of its own in which
// NodePaths are bind mounts of directories under its Root: containerd,
// kubelet and every container they start (hostPath volumes resolve
// there) see the node's own /etc/cni/net.d, /opt/cni/bin and routed's
// directories, not the first node's.
func (c *Cluster) mountNS(context.Context) error {
	if len(c.Nodes) < 2 {
		return nil
	}
	n := c.Nodes[1]
	dir := filepath.Dir(n.mnt)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// A namespace file must sit on a private mount.
	for _, args := range [][]string{{"--bind", dir, dir}, {"--make-private", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("mount %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if err := os.WriteFile(n.mnt, nil, 0o600); err != nil {
		return err
	}
	if out, err := exec.Command("unshare", "--mount="+n.mnt, "--propagation", "private", "true").CombinedOutput(); err != nil {
		return fmt.Errorf("unshare --mount: %v: %s", err, out)
	}
	for _, p := range NodePaths {
		src := n.HostPath(p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return err
		}
		if out, err := exec.Command("nsenter", "--mount="+n.mnt, "mount", "--bind", src, p).CombinedOutput(); err != nil {
			return fmt.Errorf("bind %s over %s in %s's mount namespace: %v: %s", src, p, n.Name, err, out)
		}
	}
	return nil
}

func (c *Cluster) etcd(ctx context.Context) error {
	addr := netip.AddrPortFrom(c.HostAddr, 2379).String()
	p, err := c.start("etcd", "", c.cfg.Routed, "etcd", "--data-dir", filepath.Join(c.cfg.Dir, "etcd"), "--listen-client", addr)
	if err != nil {
		return err
	}
	c.Etcd = "http://" + addr
	return waitFor(ctx, 30*time.Second, "etcd ready", func() error {
		if strings.Contains(p.output(), "etcd ready at") {
			return nil
		}
		return p.exitedErr()
	})
}

func (c *Cluster) routedEtcd(ctx context.Context) error {
	dir := c.path("routed-etcd-pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	pki, err := testpki.Write(dir, c.HostAddr.AsSlice())
	if err != nil {
		return err
	}
	c.EtcdTLS = pki
	addr := netip.AddrPortFrom(c.HostAddr, 2479).String()
	p, err := c.start("routed-etcd", "", c.cfg.Routed, "etcd", "--data-dir", c.path("routed-etcd"), "--listen-client", addr,
		"--cert-file", pki.ServerCert, "--key-file", pki.ServerKey, "--trusted-ca-file", pki.CAFile)
	if err != nil {
		return err
	}
	c.RoutedEtcd = "https://" + addr
	return waitFor(ctx, 30*time.Second, "routed's etcd ready", func() error {
		if strings.Contains(p.output(), "etcd ready at") {
			return nil
		}
		return p.exitedErr()
	})
}

func (c *Cluster) apiserver(ctx context.Context) error {
	s, err := kubeapiserver.Start(ctx, kubeapiserver.Config{Binary: c.cfg.KubeAPIServer, Dir: filepath.Join(c.cfg.Dir, "apiserver"),
		EtcdServers: []string{c.Etcd}, Advertise: c.HostAddr})
	if err != nil {
		return err
	}
	c.API = s
	c.Kubeconfig = s.AdminKubeconfig
	// The node's components reach the server at the host's address.
	nodeConfig := s.Kubeconfig(fmt.Sprintf("https://%s:%d", c.HostAddr, s.Port), s.AdminToken)
	return os.WriteFile(c.path("node.kubeconfig"), nodeConfig, 0o600)
}

func (c *Cluster) path(name string) string { return filepath.Join(c.cfg.Dir, name) }

func (c *Cluster) controlPlane(ctx context.Context) error {
	apiDir := filepath.Join(c.cfg.Dir, "apiserver")
	if _, err := c.start("kube-controller-manager", "", c.cfg.KubeNode, "kube-controller-manager",
		"--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port=0",
		"--service-account-private-key-file", filepath.Join(apiDir, "sa.key"),
		"--root-ca-file", filepath.Join(apiDir, "ca.crt"), "--use-service-account-credentials=false", "--v=1"); err != nil {
		return err
	}
	_, err := c.start("kube-scheduler", "", c.cfg.KubeNode, "kube-scheduler",
		"--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1")
	return err
}

func (c *Cluster) containerd(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.startContainerd(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startContainerd(ctx context.Context, n *Node) error {
	conf := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This machine does not let root lower a process's oom_score_adj
  # below its own (runc failed: "failed to update
  # /proc/self/oom_score_adj: Permission denied"), as in rootless setups.
  restrict_oom_score_adj = true
  # The pods' network namespaces under the state dir (Cleanup unmounts
  # what is under the cluster's dir), not in /var/run/netns where a pod
  # still running when containerd is killed left a cni-* namespace
  # behind on the host.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`, c.path("containerd"+n.suffix+"/root"), c.path("containerd"+n.suffix+"/state"), n.Containerd, PauseImage)
	confFile := c.path("containerd" + n.suffix + ".toml")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		return err
	}
	p, err := c.startOn(n, "containerd"+n.suffix, "containerd", "--config", confFile)
	if err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "containerd serving on "+n.Name, func() error {
		if out, err := exec.Command("ctr", "--address", n.Containerd, "version").CombinedOutput(); err == nil && strings.Contains(string(out), "Server:") {
			return nil
		}
		return p.exitedErr()
	})
}

// ImportImage loads an image tarball into every node's containerd, in
// its k8s.io namespace, where kubelet finds it.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	for _, n := range c.Nodes {
		out, err := exec.CommandContext(ctx, "ctr", "--address", n.Containerd, "-n", "k8s.io", "images", "import", tarball).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s on %s: %v: %s", tarball, n.Name, err, out)
		}
	}
	return nil
}

// images builds and imports the pause and busybox images.
func (c *Cluster) images(ctx context.Context) error {
	pauseDir := c.path("images/pause")
	if err := os.MkdirAll(filepath.Join(pauseDir, "bin"), 0o755); err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(pauseDir, "bin", "pause"), "./tests/k8s/pause")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("build pause: %v: %s", err, out)
	}
	busyDir := c.path("images/busybox")
	if err := os.MkdirAll(filepath.Join(busyDir, "bin"), 0o755); err != nil {
		return err
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return fmt.Errorf("busybox-static: %w", err)
	}
	if err := os.WriteFile(filepath.Join(busyDir, "bin", "busybox"), bb, 0o755); err != nil {
		return err
	}
	for _, img := range []struct {
		dir, tag string
		cfg      ociimage.Config
	}{
		{pauseDir, PauseImage, ociimage.Config{Entrypoint: []string{"/bin/pause"}}},
		{busyDir, BusyboxImage, ociimage.Config{Entrypoint: []string{"/bin/busybox"}, Cmd: []string{"sleep", "3600"}}},
	} {
		tar := img.dir + ".tar"
		if _, err := ociimage.WriteFile(tar, img.tag, img.dir, img.cfg); err != nil {
			return err
		}
		if err := c.ImportImage(ctx, tar); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) kubelet(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.startKubelet(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) startKubelet(ctx context.Context, n *Node) error {
	conf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine has cgroup v1.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
address: %s
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
# A busy test disk must not make kubelet evict the pods.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
localStorageCapacityIsolation: false
serializeImagePulls: false
resolvConf: ""
`, n.Addr, n.Containerd)
	confFile := c.path("kubelet" + n.suffix + ".yaml")
	if err := os.WriteFile(confFile, []byte(conf), 0o600); err != nil {
		return err
	}
	if _, err := c.startOn(n, "kubelet"+n.suffix, c.cfg.KubeNode, "kubelet",
		"--config", confFile, "--kubeconfig", c.path("node.kubeconfig"),
		"--root-dir", c.path("kubelet"+n.suffix), "--hostname-override", n.Name, "--node-ip", n.Addr.String(), "--v=1"); err != nil {
		return err
	}
	if _, err := c.startOn(n, "kube-proxy"+n.suffix, c.cfg.KubeNode, "kube-proxy",
		"--kubeconfig", c.path("node.kubeconfig"), "--hostname-override", n.Name, "--proxy-mode", "iptables",
		"--conntrack-max-per-core", "0", "--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256", "--v=1"); err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, "node "+n.Name+" registered", func() error {
		_, err := c.Kubectl(ctx, "get", "node", n.Name)
		return err
	})
}

// Kubectl runs kubectl as the cluster's admin.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", c.Kubeconfig, "--cache-dir", c.path("kubectl-cache")}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// NodeExecOn runs a command in node n's network (and mount) namespace.
func (c *Cluster) NodeExecOn(ctx context.Context, n *Node, args ...string) (string, error) {
	ns := []string{"--net=/var/run/netns/" + n.Name}
	if n.mnt != "" {
		ns = append(ns, "--mount="+n.mnt)
	}
	out, err := exec.CommandContext(ctx, "nsenter", append(ns, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on %s: %v: %s", strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// NodeExec runs a command in the node's network namespace.
func (c *Cluster) NodeExec(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", c.NodeNS}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s on the node: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Logs returns the last lines of a component's log.
func (c *Cluster) Logs(name string, lines int) string {
	f, err := os.Open(c.path(name + ".log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var all []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		all = append(all, sc.Text())
	}
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// proc is a process the cluster started; it is stopped by its PID.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startOn starts a process in node n's network namespace (and mount
// namespace, if it has its own).
func (c *Cluster) startOn(n *Node, name, bin string, args ...string) (*proc, error) {
	return c.startIn(name, n.Name, n.mnt, bin, args...)
}

func (c *Cluster) start(name, netns, bin string, args ...string) (*proc, error) {
	return c.startIn(name, netns, "", bin, args...)
}

func (c *Cluster) startIn(name, netns, mnt, bin string, args ...string) (*proc, error) {
	log := c.path(name + ".log")
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	if netns != "" {
		// nsenter, not "ip netns exec": that also remounts /sys for the
		// namespace, hiding the cgroup mounts kubelet and runc need.
		ns := []string{"--net=/var/run/netns/" + netns}
		if mnt != "" {
			ns = append(ns, "--mount="+mnt)
		}
		args = append(append(ns, bin), args...)
		bin = "nsenter"
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	if pf, err := os.OpenFile(c.path("pids"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		fmt.Fprintln(pf, cmd.Process.Pid)
		pf.Close()
	}
	c.procs = append(c.procs, p)
	return p, nil
}

func (p *proc) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *proc) exitedErr() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s %w: %s", p.name, errExited, LastLines(p.output(), 20))
	default:
		return errors.New("not yet")
	}
}

func (p *proc) stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// LastLines returns the last n lines of s.
func LastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// errExited marks the error of a process that exited while awaited.
var errExited = errors.New("exited")

// waitFor polls f every 250 ms until it returns nil; an error from an
// exited process (errExited) ends the wait at once. The error names what
// and f's last error.
func waitFor(ctx context.Context, limit time.Duration, what string, f func() error) error {
	err := testenv.Poll(ctx, limit, 250*time.Millisecond, func() (bool, string, error) {
		err := f()
		switch {
		case err == nil:
			return true, "", nil
		case errors.Is(err, errExited):
			return false, "", err
		}
		return false, err.Error(), nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// WaitFor is waitFor for callers: polls f until it returns nil.
func WaitFor(ctx context.Context, limit time.Duration, what string, f func() error) error {
	return waitFor(ctx, limit, what, f)
}

func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}
