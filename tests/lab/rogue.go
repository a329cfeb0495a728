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
)

// Rogue is a BGP speaker (gobgpd) that joins the cluster as a Node on
// subnet a, as a compromised or misconfigured node would, and announces
// whatever a test asks. The route reflectors peer with it like with any
// client.
type Rogue struct {
	Name string
	Addr netip.Addr
	l    *Lab
	proc *proc
}

// StartRogue registers a Node called name with host number host on
// subnet a, builds its namespace and starts gobgpd peering with every
// route reflector of the lab. It waits until a session is established.
func (l *Lab) StartRogue(ctx context.Context, name string, host byte) (*Rogue, error) {
	t := l.Topo
	ip4 := t.SubnetA.Addr().As4()
	ip4[3] = host
	addr := netip.PrefixFrom(netip.AddrFrom4(ip4), t.SubnetA.Bits())
	ns, veth := t.Prefix+"-"+name, t.Prefix+"-vr"+fmt.Sprint(host)
	rtr := t.RouterNS()
	steps := []struct {
		ns   string
		args []string
	}{
		{"", []string{"netns", "add", ns}},
		{ns, []string{"link", "add", "eth0", "type", "veth", "peer", "name", veth, "netns", rtr}},
		{ns, []string{"addr", "add", addr.String(), "dev", "eth0"}},
		{ns, []string{"link", "set", "eth0", "up"}},
		{ns, []string{"link", "set", "lo", "up"}},
		{ns, []string{"route", "add", "default", "via", t.routerAddr("a").Addr().String()}},
		{rtr, []string{"link", "set", veth, "master", "br-a"}},
		{rtr, []string{"link", "set", veth, "up"}},
	}
	for _, s := range steps {
		if err := ip(ctx, s.ns, s.args...); err != nil {
			return nil, fmt.Errorf("rogue %s: %w", name, err)
		}
	}
	node := fmt.Sprintf("apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: %s, labels: {subnet: a}}\nspec: {bgp: {ipv4Address: %s}}\n", ns, addr)
	path := filepath.Join(l.Dir, name+"-node.yaml")
	if err := os.WriteFile(path, []byte(node), 0o644); err != nil {
		return nil, err
	}
	if _, err := l.Ctl(ctx, "apply", "-f", path); err != nil {
		return nil, fmt.Errorf("rogue %s: register node: %w", name, err)
	}
	var conf strings.Builder
	fmt.Fprintf(&conf, "[global.config]\n  as = %d\n  router-id = %q\n", t.NodeAS, addr.Addr())
	for _, n := range t.Nodes {
		if n.RR {
			fmt.Fprintf(&conf, "[[neighbors]]\n  [neighbors.config]\n    neighbor-address = %q\n    peer-as = %d\n", n.Addr.Addr(), t.NodeAS)
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
	r := &Rogue{Name: ns, Addr: addr.Addr(), l: l, proc: p}
	err = l.waitFor(ctx, 60*time.Second, "rogue BGP session", func() error {
		out, err := r.gobgp(ctx, "neighbor")
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Establ") {
			return fmt.Errorf("no established session:\n%s", out)
		}
		return nil
	})
	if err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *Rogue) gobgp(ctx context.Context, args ...string) (string, error) {
	return nsRun(ctx, r.Name, append([]string{"gobgp", "-u", "127.0.0.1", "-p", "50051"}, args...)...)
}

// Announce originates prefix with the rogue itself as next hop.
func (r *Rogue) Announce(ctx context.Context, prefix netip.Prefix) error {
	_, err := r.gobgp(ctx, "global", "rib", "add", "-a", "ipv4", prefix.String(), "nexthop", r.Addr.String())
	return err
}

// Stop ends the rogue's gobgpd (its namespace goes with the lab).
func (r *Rogue) Stop() { r.proc.stop(syscall.SIGTERM, 5*time.Second) }
