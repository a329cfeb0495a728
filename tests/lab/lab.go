package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binaries says where the lab finds routed's and the CNI tools' binaries.
type Binaries struct {
	Routed, Routedctl, RoutedCNI, RoutedIPAM string
	Cnitool                                  string
}

// Lab is a running lab. Every name it creates starts with Topo.Prefix.
type Lab struct {
	Topo Topology
	Bins Binaries
	Dir  string // logs, sockets, CNI config, pid file
	Logf func(format string, args ...any)
	// NodeArgs are extra routed flags per node name, used by every
	// later StartNode of that node (set them between StopNode and
	// StartNode to restart a node with other flags).
	NodeArgs map[string][]string
	etcd     *proc
	bird     *proc
	nodes    map[string]*proc
	// podsMu guards pods: tests add pods from many goroutines at once.
	podsMu sync.Mutex
	pods   []Pod
	// etcdMembers, etcdTLS and etcdArgs are set for an etcd cluster
	// (Topo.EtcdMembers > 1).
	etcdMembers []*proc
	etcdTLS     *etcdTLS
	etcdArgs    func(member int) []string
}

// Pod is a pod the lab created through the CNI plugin.
type Pod struct {
	Name, Node, NS, ContainerID string
	// Namespace is the pod's Kubernetes namespace ("": default).
	Namespace string
	IP        string
	// IP6 is the pod's IPv6 address in a dual-stack lab ("" otherwise).
	IP6 string
}

// New prepares a lab in dir; call Up to build it and Down to remove it.
func New(topo Topology, bins Binaries, dir string, logf func(string, ...any)) *Lab {
	return &Lab{Topo: topo, Bins: bins, Dir: dir, Logf: logf, nodes: map[string]*proc{}}
}

// Cleanup removes what an earlier, interrupted lab with the same prefix
// left: processes from its pid file, then its namespaces.
func Cleanup(ctx context.Context, prefix, dir string) {
	if b, err := os.ReadFile(filepath.Join(dir, "pids")); err == nil {
		for _, line := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(line); err == nil && pid > 1 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(filepath.Join(dir, "pids"))
	}
	// A lab is a new cluster every time: an empty datastore, and nodes
	// that remember no earlier cluster (a node that does holds its
	// dataplane and BGP rather than join another cluster's datastore).
	_ = os.RemoveAll(filepath.Join(dir, "etcd"))
	states, _ := filepath.Glob(filepath.Join(dir, "*", "state"))
	for _, s := range states {
		_ = os.RemoveAll(s)
	}
	out, _ := run(ctx, "ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			_ = ip(ctx, "", "netns", "del", f[0])
		}
	}
}

func (l *Lab) recordPID(p *proc) { recordPID(l.Dir, p) }

// recordPID appends p's PID to dir's pid file, which Cleanup reads.
func recordPID(dir string, p *proc) {
	f, err := os.OpenFile(filepath.Join(dir, "pids"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err == nil {
		fmt.Fprintln(f, p.cmd.Process.Pid)
		f.Close()
	}
}

// Up builds the network, starts etcd, the router's BIRD and every node's
// routed, and applies the lab's configuration.
func (l *Lab) Up(ctx context.Context) error {
	if err := l.Topo.validateEtcdMembers(); err != nil {
		return err
	}
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return err
	}
	Cleanup(ctx, l.Topo.Prefix, l.Dir)
	steps := []struct {
		name string
		f    func(context.Context) error
	}{
		{"network", l.buildNetwork},
		{"etcd", l.startEtcd},
		{"configuration", l.applyConfig},
		{"router BGP (BIRD)", l.startBird},
		{"routed on every node", l.startNodes},
		{"CNI configuration", l.writeCNIConfig},
	}
	for _, s := range steps {
		if s.name == "router BGP (BIRD)" && l.Topo.NoRouterBGP {
			continue
		}
		l.Logf("lab: %s", s.name)
		if err := s.f(ctx); err != nil {
			return fmt.Errorf("lab %s: %w", s.name, err)
		}
	}
	return nil
}

// Down stops every process the lab started (by PID) and removes its
// namespaces. Safe to call more than once and after a failed Up.
func (l *Lab) Down(ctx context.Context) {
	for _, p := range l.pods {
		_ = l.delPod(ctx, p)
	}
	l.pods = nil
	for _, p := range l.nodes {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
	l.bird.stop(syscall.SIGTERM, 5*time.Second)
	l.etcd.stop(syscall.SIGTERM, 5*time.Second)
	l.stopEtcdMembers()
	Cleanup(ctx, l.Topo.Prefix, l.Dir)
}

func (l *Lab) buildNetwork(ctx context.Context) error {
	t := l.Topo
	rtr := t.RouterNS()
	cmds := [][]string{{"netns", "add", rtr}}
	for _, n := range t.Nodes {
		cmds = append(cmds, []string{"netns", "add", t.NodeNS(n)})
	}
	for _, c := range cmds {
		if err := ip(ctx, "", c...); err != nil {
			return err
		}
	}
	for _, s := range []string{"a", "b"} {
		br := "br-" + s
		ra := t.routerAddr(s)
		for _, c := range [][]string{
			{"link", "add", br, "type", "bridge"},
			{"addr", "add", ra.String(), "dev", br},
			{"link", "set", br, "up"},
		} {
			if err := ip(ctx, rtr, c...); err != nil {
				return err
			}
		}
	}
	if err := ip(ctx, rtr, "link", "set", "lo", "up"); err != nil {
		return err
	}
	if _, err := nsRun(ctx, rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return err
	}
	if t.DualStack {
		if _, err := nsRun(ctx, rtr, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"); err != nil {
			return err
		}
		for _, s := range []string{"a", "b"} {
			if err := ip(ctx, rtr, "addr", "add", t.routerAddr6(s).String(), "dev", "br-"+s, "nodad"); err != nil {
				return err
			}
		}
	}
	for i, n := range t.Nodes {
		ns := t.NodeNS(n)
		peer := fmt.Sprintf("%s-v%d", t.Prefix, i+1) // router side, <= 15 chars
		steps := []struct {
			ns   string
			args []string
		}{
			{ns, []string{"link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", rtr}},
			{ns, []string{"addr", "add", n.Addr.String(), "dev", "eth0"}},
			{ns, []string{"link", "set", "eth0", "up"}},
			{ns, []string{"link", "set", "lo", "up"}},
			{ns, []string{"route", "add", "default", "via", t.routerAddr(n.Subnet).Addr().String()}},
			{rtr, []string{"link", "set", peer, "master", "br-" + n.Subnet}},
			{rtr, []string{"link", "set", peer, "up"}},
		}
		if t.DualStack {
			steps = append(steps, []struct {
				ns   string
				args []string
			}{
				{ns, []string{"addr", "add", n.Addr6.String(), "dev", "eth0", "nodad"}},
				{ns, []string{"-6", "route", "add", "default", "via", t.routerAddr6(n.Subnet).Addr().String()}},
			}...)
		}
		for _, s := range steps {
			if err := ip(ctx, s.ns, s.args...); err != nil {
				return err
			}
		}
	}
	return nil
}

func (l *Lab) startEtcd(ctx context.Context) error {
	if l.Topo.clustered() {
		return l.startEtcdCluster(ctx)
	}
	addr := strings.TrimPrefix(l.Topo.EtcdEndpoint(), "http://")
	p, err := startProc(l.Topo.RouterNS(), filepath.Join(l.Dir, "etcd.log"), nil,
		l.Bins.Routed, "etcd", "--data-dir", filepath.Join(l.Dir, "etcd"), "--listen-client", addr)
	if err != nil {
		return err
	}
	l.etcd = p
	l.recordPID(p)
	return l.waitFor(ctx, 30*time.Second, "etcd to answer", func() error {
		_, err := l.Ctl(ctx, "get", "ippools")
		return err
	})
}

// waitFor polls f until it succeeds or timeout passes.
func (l *Lab) waitFor(ctx context.Context, timeout time.Duration, what string, f func() error) error {
	return waitUntil(ctx, timeout, what, f)
}

// Ctl runs routedctl against the lab's etcd (all members, with the
// client certificate for a cluster) from inside the router namespace and returns its output.
func (l *Lab) Ctl(ctx context.Context, args ...string) (string, error) {
	full := append(append([]string{l.Bins.Routedctl}, l.etcdClientArgs()...), args...)
	return nsRun(ctx, l.Topo.RouterNS(), full...)
}

// NodeCtl runs routedctl inside a node namespace against that node's
// status socket (node status, show ...).
func (l *Lab) NodeCtl(ctx context.Context, node string, args ...string) (string, error) {
	full := append(append(append([]string{"env", "ROUTED_STATUS_SOCKET=" + l.socket(node)}, l.etcdClientEnv()...), l.Bins.Routedctl), args...)
	return nsRun(ctx, node, full...)
}

func (l *Lab) socket(node string) string   { return filepath.Join(l.Dir, node, "routed.sock") }
func (l *Lab) stateDir(node string) string { return filepath.Join(l.Dir, node, "state") }
