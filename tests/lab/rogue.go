package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
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
	g    *GoBGP
}

// StartRogue registers a Node called name with host number host on
// subnet a, builds its namespace and starts gobgpd peering with every
// route reflector of the lab. It waits until a session is established.
func (l *Lab) StartRogue(ctx context.Context, name string, host byte) (*Rogue, error) {
	t := l.Topo
	ns, addr, err := l.AddHost(ctx, name, host)
	if err != nil {
		return nil, fmt.Errorf("rogue %s: %w", name, err)
	}
	node := fmt.Sprintf("apiVersion: routed.io/v1\nkind: Node\nmetadata: {name: %s, labels: {subnet: a}}\nspec: {bgp: {ipv4Address: %s}}\n", ns, addr)
	path := filepath.Join(l.Dir, name+"-node.yaml")
	if err := os.WriteFile(path, []byte(node), 0o644); err != nil {
		return nil, err
	}
	if _, err := l.Ctl(ctx, "apply", "-f", path); err != nil {
		return nil, fmt.Errorf("rogue %s: register node: %w", name, err)
	}
	var rrs []GoBGPNeighbor
	for _, n := range t.Nodes {
		if n.RR {
			rrs = append(rrs, GoBGPNeighbor{Addr: n.Addr.Addr(), AS: t.NodeAS})
		}
	}
	g, err := l.StartGoBGP(name, ns, addr.Addr(), t.NodeAS, rrs...)
	if err != nil {
		return nil, err
	}
	r := &Rogue{Name: ns, Addr: addr.Addr(), l: l, g: g}
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
	return r.g.Run(ctx, args...)
}

// Announce originates prefix with the rogue itself as next hop.
func (r *Rogue) Announce(ctx context.Context, prefix netip.Prefix) error {
	_, err := r.gobgp(ctx, "global", "rib", "add", "-a", "ipv4", prefix.String(), "nexthop", r.Addr.String())
	return err
}

// Stop ends the rogue's gobgpd (its namespace goes with the lab).
func (r *Rogue) Stop() { r.g.Stop() }
