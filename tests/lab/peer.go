package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// AddHost builds a namespace called <prefix>-<name> with host number host
// on subnet a (eth0, default route via the lab's router), as a machine
// on a node's network would be: a ToR, a route server, a rogue node. In
// a dual-stack lab it has HostAddr6(host) too.
func (l *Lab) AddHost(ctx context.Context, name string, host byte) (string, netip.Prefix, error) {
	t := l.Topo
	ip4 := t.SubnetA.Addr().As4()
	ip4[3] = host
	addr := netip.PrefixFrom(netip.AddrFrom4(ip4), t.SubnetA.Bits())
	ns, veth := t.Prefix+"-"+name, t.Prefix+"-vr"+fmt.Sprint(host)
	rtr := t.RouterNS()
	type step struct {
		ns   string
		args []string
	}
	steps := []step{
		{"", []string{"netns", "add", ns}},
		{ns, []string{"link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", rtr}},
		{ns, []string{"addr", "add", addr.String(), "dev", "eth0"}},
		{ns, []string{"link", "set", "eth0", "up"}},
		{ns, []string{"link", "set", "lo", "up"}},
		{ns, []string{"route", "add", "default", "via", t.routerAddr("a").Addr().String()}},
		{rtr, []string{"link", "set", veth, "master", "br-a"}},
		{rtr, []string{"link", "set", veth, "up"}},
	}
	if t.DualStack {
		steps = append(steps,
			step{ns, []string{"-6", "addr", "add", t.HostAddr6(host).String(), "dev", "eth0", "nodad"}},
			step{ns, []string{"-6", "route", "add", "default", "via", t.routerAddr6("a").Addr().String()}})
	}
	for _, s := range steps {
		if err := ip(ctx, s.ns, s.args...); err != nil {
			return "", netip.Prefix{}, fmt.Errorf("host %s: %w", name, err)
		}
	}
	return ns, addr, nil
}

// GoBGP is a gobgpd a test runs as a BGP peer in a namespace, driven
// through its gobgp CLI.
type GoBGP struct {
	NS   string
	Addr netip.Addr
	proc *proc
}

// GoBGPNeighbor is one neighbor of a GoBGP peer.
type GoBGPNeighbor struct {
	Addr netip.Addr
	AS   uint32
	// Passive waits for the neighbor to connect (unset: gobgpd dials).
	Passive bool
	// ConnectRetry, when set, is how often gobgpd dials and how soon it
	// dials again after the neighbor reset the session (gobgpd's
	// defaults: 120 s and 30 s).
	ConnectRetry time.Duration
}

// StartGoBGP runs gobgpd in ns as AS as with router ID (and next hop) addr,
// peering with neighbors. Its log is <name>-gobgpd.log in the lab's
// directory; it stops with the lab (or Stop).
func (l *Lab) StartGoBGP(name, ns string, addr netip.Addr, as uint32, neighbors ...GoBGPNeighbor) (*GoBGP, error) {
	var conf strings.Builder
	fmt.Fprintf(&conf, "[global.config]\n  as = %d\n  router-id = %q\n", as, addr)
	for _, n := range neighbors {
		fmt.Fprintf(&conf, "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = %q\n    peer-as = %d\n", n.Addr, n.AS)
		if n.Passive {
			fmt.Fprintf(&conf, "  [neighbors.transport.config]\n    passive-mode = true\n")
		}
		if s := int(n.ConnectRetry.Seconds()); s > 0 {
			fmt.Fprintf(&conf, "  [neighbors.timers.config]\n    connect-retry = %d\n    idle-hold-time-after-reset = %d\n", s, s)
		}
	}
	confPath := filepath.Join(l.Dir, name+"-gobgpd.toml")
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	p, err := startProc(ns, filepath.Join(l.Dir, name+"-gobgpd.log"), nil, "gobgpd", "-f", confPath, "--api-hosts", "127.0.0.1:50051")
	if err != nil {
		return nil, err
	}
	l.recordPID(p)
	return &GoBGP{NS: ns, Addr: addr, proc: p}, nil
}

// Run runs the gobgp CLI against the peer.
func (g *GoBGP) Run(ctx context.Context, args ...string) (string, error) {
	return nsRun(ctx, g.NS, append([]string{"gobgp", "-u", "127.0.0.1", "-p", "50051"}, args...)...)
}

// WaitEstablished waits until gobgpd's session with neighbor is up.
func (g *GoBGP) WaitEstablished(ctx context.Context, neighbor netip.Addr, timeout time.Duration) error {
	err := testenv.Poll(ctx, timeout, 250*time.Millisecond, func() (bool, string, error) {
		out, err := g.Run(ctx, "neighbor")
		if err != nil {
			return false, fmt.Sprintf("%v\n%s", err, out), nil
		}
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == neighbor.String() && strings.Contains(line, "Establ") {
				return true, "", nil
			}
		}
		return false, "gobgp neighbor:\n" + out, nil
	})
	if err != nil {
		return fmt.Errorf("gobgpd in %s: no session with %s: %w", g.NS, neighbor, err)
	}
	return nil
}

// Stop ends gobgpd.
func (g *GoBGP) Stop() { g.proc.stop(syscall.SIGTERM, 5*time.Second) }
