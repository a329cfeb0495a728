package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// startNodes starts routed on every node and waits until each reports its
// BGP sessions established.
func (l *Lab) startNodes(ctx context.Context) error {
	for _, n := range l.Topo.Nodes {
		if err := l.StartNode(ctx, n.Name); err != nil {
			return err
		}
	}
	for _, n := range l.Topo.Nodes {
		if err := l.WaitNodeReady(ctx, n.Name, 60*time.Second); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) node(name string) (NodeSpec, error) {
	for _, n := range l.Topo.Nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return NodeSpec{}, fmt.Errorf("lab: no node %q", name)
}

// StartNode starts routed in a node's namespace.
func (l *Lab) StartNode(ctx context.Context, name string) error {
	n, err := l.node(name)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(l.stateDir(name), 0o755); err != nil {
		return err
	}
	addr := n.Addr.Addr().String()
	role := "node"
	if n.Dedicated {
		role = "route-reflector"
	}
	ip6 := "none"
	if n.Addr6.IsValid() {
		ip6 = n.Addr6.String()
	}
	args := append([]string{l.Bins.Routed,
		"--role", role,
		"--ip6", ip6,
		"--nodename", name,
		"--ip", n.Addr.String(),
		"--status-socket", l.socket(name),
		"--health-listen", addr + ":9099",
		"--metrics-listen", addr + ":9091",
		"--state-dir", l.stateDir(name),
		"--no-default-ipv4-pool",
		"--ipam-gc-grace", "30s",
		"--ipam-gc-interval", "5s",
	}, l.etcdClientArgs()...)
	if l.Topo.NoPolicy {
		args = append(args, "--disable-policy")
	}
	args = append(args, l.NodeArgs[name]...)
	p, err := startProc(name, filepath.Join(l.Dir, name, "routed.log"), nil, args...)
	if err != nil {
		return err
	}
	l.nodes[name] = p
	l.recordPID(p)
	return nil
}

// StopNode stops a node's routed: gracefully (SIGTERM) or with kill -9.
func (l *Lab) StopNode(name string, kill bool) {
	p := l.nodes[name]
	if kill {
		p.stop(syscall.SIGKILL, 5*time.Second)
	} else {
		p.stop(syscall.SIGTERM, 15*time.Second)
	}
	delete(l.nodes, name)
}

// WaitNodeReady waits until `routedctl node status` on the node exits 0
// (process up, every expected session established).
func (l *Lab) WaitNodeReady(ctx context.Context, name string, timeout time.Duration) error {
	return l.waitFor(ctx, timeout, name+" BGP sessions", func() error {
		if p := l.nodes[name]; p == nil || !p.running() {
			return fmt.Errorf("routed on %s is not running; see %s", name, filepath.Join(l.Dir, name, "routed.log"))
		}
		_, err := l.NodeCtl(ctx, name, "node", "status")
		return err
	})
}

// NodePID is the PID of a node's routed (0 when it is not running):
// `ip netns exec` execs routed in its own place.
func (l *Lab) NodePID(name string) int {
	p := l.nodes[name]
	if p == nil || !p.running() {
		return 0
	}
	return p.cmd.Process.Pid
}
