// Package cluster runs a real one-node Kubernetes cluster on this
// machine for routed's tests and `make k8s-demo`: etcd (`routed etcd`),
// kube-apiserver, kube-controller-manager and kube-scheduler in the
// test's network namespace; containerd (Debian's, CRI plugin), kubelet
// and kube-proxy in a node network namespace joined to it by a veth
// pair. Pods, routed's DaemonSet among them, run in that namespace
// (hostNetwork pods) or their own; the node's CNI directories are the
// host's /opt/cni/bin and /etc/cni/net.d, where routed's install-cni
// puts its files. No registry is reachable: the pause and busybox images
// are built locally (internal/ociimage) and imported into containerd.
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
	"/opt/cni/bin/routed-cni", "/opt/cni/bin/routed-ipam",
	"/var/lib/routed", "/var/run/routed", "/var/log/routed",
}

// Config says where and how to run the cluster.
type Config struct {
	// Dir holds every component's state and log.
	Dir string
	// Prefix names the node namespace (<prefix>-node, also the node's
	// name) and the host-side veth (<prefix>-h).
	Prefix string
	// Subnet joins the host (.1: etcd, kube-apiserver) and the node (.2).
	Subnet netip.Prefix
	// Routed is the routed binary (`routed etcd`).
	Routed string
	// KubeAPIServer and KubeNode are the Kubernetes binaries
	// (kubeapiserver.Build, BuildNode).
	KubeAPIServer, KubeNode string
	Logf                    func(string, ...any)
}

// Cluster is a running one-node cluster.
type Cluster struct {
	cfg      Config
	Node     string
	NodeNS   string
	HostAddr netip.Addr
	NodeAddr netip.Addr
	// Etcd is the etcd endpoint, reachable from the node (routed uses it
	// too, under its own key prefix).
	Etcd       string
	API        *kubeapiserver.Server
	Kubeconfig string
	Containerd string // containerd's socket
	procs      []*proc
}

// Up starts the cluster and waits until the node is registered. Call
// Down in every case (it also undoes a partial Up).
func Up(ctx context.Context, cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg, Node: cfg.Prefix + "-node", NodeNS: cfg.Prefix + "-node"}
	c.HostAddr = cfg.Subnet.Addr().Next()
	c.NodeAddr = c.HostAddr.Next()
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
		{"etcd", c.etcd},
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
	if b, err := os.ReadFile(filepath.Join(dir, "pids")); err == nil {
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(filepath.Join(dir, "pids"))
	}
	// Pods' sandboxes (containerd-shim) live on in the node namespace
	// after containerd is killed: end every process there.
	if out, err := exec.Command("ip", "netns", "pids", prefix+"-node").Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = exec.Command("ip", "netns", "del", prefix+"-node").Run()
	// What an earlier run's routed left on the host (hostPath volumes):
	// a node that remembers another cluster holds against this one.
	for _, p := range HostPaths {
		_ = os.RemoveAll(p)
	}
	_ = exec.Command("ip", "link", "del", prefix+"-h").Run()
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

func (c *Cluster) logf(format string, a ...any) { c.cfg.Logf(format, a...) }

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (c *Cluster) network(context.Context) error {
	bits := strconv.Itoa(c.cfg.Subnet.Bits())
	for _, args := range [][]string{
		{"netns", "add", c.NodeNS},
		{"link", "add", c.cfg.Prefix + "-h", "type", "veth", "peer", "name", "eth0", "netns", c.NodeNS},
		{"addr", "add", c.HostAddr.String() + "/" + bits, "dev", c.cfg.Prefix + "-h"},
		{"link", "set", c.cfg.Prefix + "-h", "up"},
		{"-n", c.NodeNS, "addr", "add", c.NodeAddr.String() + "/" + bits, "dev", "eth0"},
		{"-n", c.NodeNS, "link", "set", "eth0", "up"},
		{"-n", c.NodeNS, "link", "set", "lo", "up"},
		{"-n", c.NodeNS, "route", "add", "default", "via", c.HostAddr.String()},
	} {
		if err := ipCmd(args...); err != nil {
			return err
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
	c.Containerd = c.path("containerd.sock")
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
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`, c.path("containerd/root"), c.path("containerd/state"), c.Containerd, PauseImage)
	if err := os.WriteFile(c.path("containerd.toml"), []byte(conf), 0o600); err != nil {
		return err
	}
	p, err := c.start("containerd", c.NodeNS, "containerd", "--config", c.path("containerd.toml"))
	if err != nil {
		return err
	}
	return waitFor(ctx, 30*time.Second, "containerd serving", func() error {
		if out, err := exec.Command("ctr", "--address", c.Containerd, "version").CombinedOutput(); err == nil && strings.Contains(string(out), "Server:") {
			return nil
		}
		return p.exitedErr()
	})
}

// ImportImage loads an image tarball into containerd's k8s.io namespace,
// where kubelet finds it.
func (c *Cluster) ImportImage(ctx context.Context, tarball string) error {
	out, err := exec.CommandContext(ctx, "ctr", "--address", c.Containerd, "-n", "k8s.io", "images", "import", tarball).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr images import %s: %v: %s", tarball, err, out)
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
`, c.NodeAddr, c.Containerd)
	if err := os.WriteFile(c.path("kubelet.yaml"), []byte(conf), 0o600); err != nil {
		return err
	}
	if _, err := c.start("kubelet", c.NodeNS, c.cfg.KubeNode, "kubelet",
		"--config", c.path("kubelet.yaml"), "--kubeconfig", c.path("node.kubeconfig"),
		"--root-dir", c.path("kubelet"), "--hostname-override", c.Node, "--node-ip", c.NodeAddr.String(), "--v=1"); err != nil {
		return err
	}
	if _, err := c.start("kube-proxy", c.NodeNS, c.cfg.KubeNode, "kube-proxy",
		"--kubeconfig", c.path("node.kubeconfig"), "--hostname-override", c.Node, "--proxy-mode", "iptables",
		"--conntrack-max-per-core", "0", "--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256", "--v=1"); err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, "node "+c.Node+" registered", func() error {
		_, err := c.Kubectl(ctx, "get", "node", c.Node)
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

func (c *Cluster) start(name, netns, bin string, args ...string) (*proc, error) {
	log := c.path(name + ".log")
	f, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	if netns != "" {
		// nsenter, not "ip netns exec": that also remounts /sys for the
		// namespace, hiding the cgroup mounts kubelet and runc need.
		args = append([]string{"--net=/var/run/netns/" + netns, bin}, args...)
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
		return fmt.Errorf("%s exited: %s", p.name, LastLines(p.output(), 20))
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

// waitFor polls f until it returns nil; an error other than "not yet"
// from an exited process ends the wait at once.
func waitFor(ctx context.Context, limit time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if strings.Contains(err.Error(), "exited") || time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
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
