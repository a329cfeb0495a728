package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// applyConfig writes the lab's pool, BGP configuration and peers: mesh
// off, n1 the route reflector for everyone, and every node peering eBGP
// with the router on its own subnet (the router needs the pod routes to
// forward between subnets when there is no IPIP) unless Topo.NoRouterBGP.
func (l *Lab) applyConfig(ctx context.Context) error {
	// The profile of the lab's pods' namespace: in a Kubernetes cluster
	// routed's controllers write it for every namespace; the lab has none.
	if err := l.ApplyYAML(ctx, "profiles.yaml", NamespaceProfileYAML("default")); err != nil {
		return err
	}
	if l.Topo.Configure != nil {
		return l.Topo.Configure(ctx, l)
	}
	return l.ApplyYAML(ctx, "lab.yaml", l.Topo.ConfigYAML())
}

// ApplyYAML writes yaml into the lab's directory as name and applies it
// with routedctl.
func (l *Lab) ApplyYAML(ctx context.Context, name, yaml string) error {
	path := filepath.Join(l.Dir, name)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		return err
	}
	_, err := l.Ctl(ctx, "apply", "-f", path)
	return err
}

// NamespaceProfileYAML is the profile routed's controllers keep for a
// Kubernetes namespace: its pods allow everything until a policy selects
// them.
func NamespaceProfileYAML(ns string) string {
	return fmt.Sprintf(`apiVersion: routed.io/v1
kind: Profile
metadata: {name: kns.%s}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`, ns)
}

// ConfigYAML is the lab's configuration as routed.io/v1 resources.
func (t Topology) ConfigYAML() string {
	var b strings.Builder
	b.WriteString(t.poolYAML())
	fmt.Fprintf(&b, `---
apiVersion: routed.io/v1
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: %d, nodeToNodeMeshEnabled: false}
`, t.NodeAS)
	if !t.NoNodeBGP {
		b.WriteString(`---
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: peer-with-route-reflectors}
spec: {nodeSelector: "!has(route-reflector)", peerSelector: "has(route-reflector)"}
`)
	}
	for _, s := range []string{"a", "b"} {
		if t.NoRouterBGP {
			break
		}
		fmt.Fprintf(&b, `---
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: tor-%s}
spec: {nodeSelector: "subnet == '%s'", peerIP: %s, asNumber: %d}
`, s, s, t.routerAddr(s).Addr(), t.RouterAS)
		if t.DualStack {
			fmt.Fprintf(&b, `---
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: tor-%s-v6}
spec: {nodeSelector: "subnet == '%s'", peerIP: "%s", asNumber: %d}
`, s, s, t.routerAddr6(s).Addr(), t.RouterAS)
		}
	}
	for _, n := range t.Nodes {
		rr := ""
		labels := fmt.Sprintf("subnet: %s", n.Subnet)
		if n.RR {
			rr = ", routeReflectorClusterID: 224.0.0.1"
			labels += ", route-reflector: \"true\""
		}
		if n.Addr6.IsValid() {
			rr += fmt.Sprintf(", ipv6Address: \"%s\"", n.Addr6)
		}
		fmt.Fprintf(&b, `---
apiVersion: routed.io/v1
kind: Node
metadata: {name: %s, labels: {%s}}
spec: {bgp: {ipv4Address: %s%s}}
`, n.Name, labels, n.Addr, rr)
	}
	return b.String()
}

// poolYAML is the lab pool with the topology's encapsulation.
func (t Topology) poolYAML() string {
	vxlan := t.VXLANMode
	if vxlan == "" {
		vxlan = "Never"
	}
	pool := fmt.Sprintf(`apiVersion: routed.io/v1
kind: IPPool
metadata: {name: lab-pool}
spec: {cidr: %s, blockSize: 26, ipipMode: %s, vxlanMode: %s, natOutgoing: false}
`, t.PoolCIDR, t.IPIPMode, vxlan)
	if t.DualStack {
		vxlan6 := t.Pool6VXLANMode
		if vxlan6 == "" {
			vxlan6 = "Never"
		}
		pool += fmt.Sprintf(`---
apiVersion: routed.io/v1
kind: IPPool
metadata: {name: lab-pool-v6}
spec: {cidr: "%s", blockSize: 122, vxlanMode: %s, natOutgoing: false}
`, t.Pool6CIDR, vxlan6)
	}
	return pool
}

// SetPoolEncap switches the lab pool's encapsulation on the running lab.
func (l *Lab) SetPoolEncap(ctx context.Context, ipipMode, vxlanMode string) error {
	l.Topo.IPIPMode, l.Topo.VXLANMode = ipipMode, vxlanMode
	path := filepath.Join(l.Dir, "pool.yaml")
	pool := l.Topo.poolYAML()
	if err := os.WriteFile(path, []byte(pool), 0o644); err != nil {
		return err
	}
	_, err := l.Ctl(ctx, "apply", "-f", path)
	return err
}

// TunnelTxPackets is the count of packets a node sent through a device
// (vxlan.routed, tunl0).
func (l *Lab) TunnelTxPackets(ctx context.Context, node, dev string) (uint64, error) {
	out, err := nsRun(ctx, node, "cat", "/sys/class/net/"+dev+"/statistics/tx_packets")
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(out), 10, 64)
}

// startBird runs BIRD 2 in the router namespace as the top-of-rack
// router: it learns every node's blocks over eBGP and installs them in
// the router's kernel; it advertises nothing back.
func (l *Lab) startBird(ctx context.Context) error {
	t := l.Topo
	var b strings.Builder
	fmt.Fprintf(&b, "router id %s;\nprotocol device {}\n", t.routerAddr("a").Addr())
	b.WriteString("protocol kernel { ipv4 { import none; export all; }; }\n")
	fmt.Fprintf(&b, "template bgp nodes { local as %d; ipv4 { import all; export none; }; }\n", t.RouterAS)
	for i, n := range t.Nodes {
		fmt.Fprintf(&b, "protocol bgp node%d from nodes { neighbor %s as %d; source address %s; }\n",
			i+1, n.Addr.Addr(), t.NodeAS, t.routerAddr(n.Subnet).Addr())
	}
	if t.DualStack {
		b.WriteString("protocol kernel kernel6 { ipv6 { import none; export all; }; }\n")
		fmt.Fprintf(&b, "template bgp nodes6 { local as %d; ipv6 { import all; export none; }; }\n", t.RouterAS)
		for i, n := range t.Nodes {
			fmt.Fprintf(&b, "protocol bgp node%d_v6 from nodes6 { neighbor %s as %d; source address %s; }\n",
				i+1, n.Addr6.Addr(), t.NodeAS, t.routerAddr6(n.Subnet).Addr())
		}
	}
	conf := filepath.Join(l.Dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
		return err
	}
	p, err := startProc(t.RouterNS(), filepath.Join(l.Dir, "bird.log"), nil,
		"bird", "-f", "-c", conf, "-s", l.birdSocket(), "-P", filepath.Join(l.Dir, "bird.pid"))
	if err != nil {
		return err
	}
	l.bird = p
	l.recordPID(p)
	return l.waitFor(ctx, 10*time.Second, "BIRD", func() error {
		_, err := l.Birdc(ctx, "show", "status")
		return err
	})
}

func (l *Lab) birdSocket() string { return filepath.Join(l.Dir, "bird.ctl") }

// Birdc queries the router's BIRD.
func (l *Lab) Birdc(ctx context.Context, args ...string) (string, error) {
	return nsRun(ctx, l.Topo.RouterNS(), append([]string{"birdc", "-s", l.birdSocket()}, args...)...)
}

// writeCNIConfig writes each node's conflist: routed-cni with
// routed-ipam, pointing at the lab's etcd and the node's state dir.
func (l *Lab) writeCNIConfig(ctx context.Context) error {
	for _, n := range l.Topo.Nodes {
		dir := filepath.Join(l.Dir, n.Name, "net.d")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "k8s-pod-network",
  "plugins": [{
    "type": "routed-cni",
    "etcd_endpoints": %q,%s
    "nodename": %q,
    "log_level": "info",
    "log_file_path": %q,
    "mtu_file": %q,
    "ipam_lock_file": %q,%s
    "policy_setup_timeout_seconds": %d,
    "ipam": {"type": "routed-ipam"}
  }]
}
`, l.Topo.EtcdEndpoint(), l.cniEtcdTLS(), n.Name, filepath.Join(l.Dir, n.Name, "cni.log"), filepath.Join(l.stateDir(n.Name), "mtu"),
			// Each lab node is a host of its own: its own host IPAM lock,
			// not this machine's /var/run/routed/ipam.lock.
			filepath.Join(l.Dir, n.Name, "ipam.lock"), l.cniSocketConf(n.Name), l.policyWait())
		if err := os.WriteFile(filepath.Join(dir, "10-routed.conflist"), []byte(conf), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// cniSocketConf is the conflist's routed_socket field: the node's own
// routed's CNI socket with Topology.CNIViaRouted, else "none" (the
// plugin writes etcd itself). Never the plugin's default,
// /var/run/routed/cni.sock: that is the socket of whatever routed this
// machine runs (a k8s-tier cluster's node, another test's), and a lab's
// ADDs must not depend on it.
func (l *Lab) cniSocketConf(node string) string {
	if !l.Topo.CNIViaRouted {
		return "\n    \"routed_socket\": \"none\","
	}
	return fmt.Sprintf("\n    \"routed_socket\": %q,", filepath.Join(filepath.Dir(l.socket(node)), "cni.sock"))
}

// cniEtcdTLS is the conflist's etcd_*_file fields for a cluster ("" for
// the plain-http etcd).
func (l *Lab) cniEtcdTLS() string {
	if l.etcdTLS == nil {
		return ""
	}
	return fmt.Sprintf("\n    \"etcd_ca_cert_file\": %q,\n    \"etcd_cert_file\": %q,\n    \"etcd_key_file\": %q,",
		l.etcdTLS.CAFile, l.etcdTLS.CertFile, l.etcdTLS.KeyFile)
}

// policyWait is how long the CNI plugin waits for felix to program a pod.
func (l *Lab) policyWait() int {
	if l.Topo.NoPolicy {
		return 0
	}
	if l.Topo.PolicySetupTimeout > 0 {
		return l.Topo.PolicySetupTimeout
	}
	return 30
}
