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

// CalicoBird is a BIRD 2 in a node's namespace configured as Calico
// v3.31.0's confd configures calico-node's BIRD for a pool without
// encapsulation and the node-to-node mesh (its bird.cfg, bird_aggr.cfg
// and bird_ipam.cfg, written in BIRD 2's syntax: Calico ships a BIRD 1.6
// fork): a blackhole per block affine to the node, exported to the
// kernel and advertised to every other node; routes learned from the
// mesh installed in the kernel (protocol bird), left there when BIRD
// stops (persist); graceful restart on every session; the lower address
// of each pair passive, as Calico's template decides it (its `gt` on the
// two addresses as strings).
type CalicoBird struct {
	Node string // the network namespace it runs in
	p    *proc
	sock string
}

// MeshProtocol is the name Calico's template gives the mesh session
// with the node at addr (Mesh_10_0_0_12).
func MeshProtocol(addr netip.Addr) string {
	return "Mesh_" + strings.ReplaceAll(addr.String(), ".", "_")
}

// calicoBirdConf is the configuration of node (address me, the mesh to
// peers): blocks are its confirmed blocks in pool, asn the cluster's AS
// number.
func calicoBirdConf(node string, me netip.Addr, peers []netip.Addr, asn uint32, pool netip.Prefix, blocks []netip.Prefix) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Calico v3.31.0's mesh configuration for %s, in BIRD 2's syntax.\nrouter id %s;\n\n", node, me)
	b.WriteString("# Aggregation of routes on this host; export the block, nothing beneath it.\nfunction calico_aggr() {\n")
	for _, blk := range blocks {
		fmt.Fprintf(&b, "  # Block %s is confirmed\n  if ( net = %s ) then { accept; }\n  if ( net ~ %s ) then { reject; }\n", blk, blk, blk)
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(&b, `function calico_export_to_bgp_peers() {
  # Don't export tunnel routes to other nodes, Felix programs them.
  if (defined(ifname)) then {
    if ((ifname ~ "*.cali") || (ifname ~ "*.calico")) then { reject; }
  }
  calico_aggr();
  if ( net ~ %[1]s ) then { accept; }
}

filter calico_kernel_programming {
  if ( net ~ %[1]s ) then { accept; }
  accept;
}

`, pool)
	b.WriteString("protocol static {\n  ipv4;\n  # IP blocks for this host.\n")
	for _, blk := range blocks {
		fmt.Fprintf(&b, "  route %s blackhole;\n", blk)
	}
	b.WriteString("}\n\n")
	fmt.Fprintf(&b, `protocol kernel {
  learn;             # Learn all alien routes from the kernel
  persist;           # Don't remove routes on bird shutdown
  scan time 2;       # Scan kernel routing table every 2 seconds
  graceful restart;
  merge paths on;
  ipv4 { import all; export filter calico_kernel_programming; };
}

protocol device { scan time 2; }

protocol direct {
  ipv4;
  interface -"cali*", -"kube-ipvs*", "*";
}

template bgp bgp_template {
  description "Connection to BGP peer";
  local as %d;
  ipv4 {
    gateway recursive;
    import all;
    export filter { calico_export_to_bgp_peers(); reject; };
    add paths on;
  };
  graceful restart;
  connect delay time 2;
  connect retry time 5;
  error wait time 5,30;
}

`, asn)
	for _, peer := range peers {
		if peer == me {
			continue
		}
		fmt.Fprintf(&b, "protocol bgp %s from bgp_template {\n  neighbor %s as %d;\n  source address %s;\n", MeshProtocol(peer), peer, asn, me)
		if peer.String() > me.String() {
			b.WriteString("  passive on; # Mesh is unidirectional, peer will connect to us.\n")
		}
		b.WriteString("}\n")
	}
	return b.String()
}

// StartCalicoBird starts node's BIRD with the mesh to every other lab
// node (see CalicoBird), and waits until it answers.
func (l *Lab) StartCalicoBird(ctx context.Context, node string, asn uint32, pool netip.Prefix, blocks []netip.Prefix) (*CalicoBird, error) {
	n, err := l.node(node)
	if err != nil {
		return nil, err
	}
	var peers []netip.Addr
	for _, o := range l.Topo.Nodes {
		peers = append(peers, o.Addr.Addr())
	}
	b, err := StartCalicoBirdIn(ctx, node, filepath.Join(l.Dir, node), n.Addr.Addr(), peers, asn, pool, blocks)
	if err == nil {
		l.recordPID(b.p)
	}
	return b, err
}

// StartCalicoBirdIn starts calico-node's BIRD (see CalicoBird) in the
// network namespace netns of a node with address me, meshed with peers
// (me among them or not), its configuration, socket and log in dir, and
// waits until it answers. Kill or Stop ends it.
func StartCalicoBirdIn(ctx context.Context, netns, dir string, me netip.Addr, peers []netip.Addr, asn uint32, pool netip.Prefix, blocks []netip.Prefix) (*CalicoBird, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, "calico-bird.cfg")
	if err := os.WriteFile(conf, []byte(calicoBirdConf(netns, me, peers, asn, pool, blocks)), 0o644); err != nil {
		return nil, err
	}
	b := &CalicoBird{Node: netns, sock: filepath.Join(dir, "calico-bird.ctl")}
	var err error
	b.p, err = startProc(netns, filepath.Join(dir, "calico-bird.log"), nil,
		"bird", "-f", "-c", conf, "-s", b.sock, "-P", filepath.Join(dir, "calico-bird.pid"))
	if err != nil {
		return nil, fmt.Errorf("calico BIRD on %s: %w", netns, err)
	}
	if err := waitUntil(ctx, 10*time.Second, "calico BIRD on "+netns, func() error {
		_, err := b.Birdc(ctx, "show", "status")
		return err
	}); err != nil {
		b.p.stop(syscall.SIGKILL, time.Second)
		return nil, err
	}
	return b, nil
}

// Birdc queries the node's BIRD.
func (b *CalicoBird) Birdc(ctx context.Context, args ...string) (string, error) {
	return nsRun(ctx, b.Node, append([]string{"birdc", "-s", b.sock}, args...)...)
}

// WaitEstablished waits until BIRD's session with the node at peer is
// Established.
func (b *CalicoBird) WaitEstablished(ctx context.Context, peer netip.Addr, timeout time.Duration) error {
	return waitUntil(ctx, timeout, fmt.Sprintf("BIRD on %s: session %s", b.Node, MeshProtocol(peer)), func() error {
		out, err := b.Birdc(ctx, "show", "protocols", MeshProtocol(peer))
		if err != nil {
			return err
		}
		if !strings.Contains(out, "Established") {
			return fmt.Errorf("not established:\n%s", out)
		}
		return nil
	})
}

// Kill stops BIRD with SIGKILL: it sends no Cease, so its peers keep
// its routes through graceful restart, and its kernel routes stay.
func (b *CalicoBird) Kill() { b.p.stop(syscall.SIGKILL, 5*time.Second) }

// Stop stops BIRD with SIGTERM: it closes its sessions with a Cease
// (administrative shutdown); its kernel routes stay (persist).
func (b *CalicoBird) Stop() { b.p.stop(syscall.SIGTERM, 5*time.Second) }
