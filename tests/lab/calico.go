package lab

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/kernel"
)

// CalicoPod is a pod a Calico cluster is running when it is migrated.
type CalicoPod struct {
	Name, Node string
}

// SeedCalico makes the lab's etcd hold a Calico cluster as Calico's
// etcdv3 backend stores it (libcalico-go's key layout and JSON): the
// lab's configuration as projectcalico.org/v3 resources, and per pod a
// /26 block affine to its node (confirmed) with the pod's address at
// ordinal 1, its handle and its WorkloadEndpoint. It also builds each
// pod's dataplane the way Calico's CNI plugin leaves it (veth cali<hash>
// with MAC ee:ee:ee:ee:ee:ee and proxy ARP on the host side, a /32 route
// to the pod, the pod's default route via 169.254.1.1), so the pods run
// before any routed does. The pods' container IDs are the ones cnitool
// derives from their netns path, so a later CNI DEL finds them.
func (l *Lab) SeedCalico(ctx context.Context, pods []CalicoPod) ([]Pod, error) {
	h, err := netns.GetFromName(l.Topo.RouterNS())
	if err != nil {
		return nil, err
	}
	defer h.Close()
	ds, err := datastore.New(datastore.Config{Endpoints: []string{l.Topo.EtcdEndpoint()}, Dialer: DialIn(h)})
	if err != nil {
		return nil, err
	}
	defer ds.Close()
	kv := map[string]string{}

	dec, err := api.Decode([]byte(l.Topo.ConfigYAML()))
	if err != nil {
		return nil, err
	}
	for _, r := range dec.Resources {
		raw, _ := json.Marshal(r)
		var obj map[string]any
		_ = json.Unmarshal(raw, &obj)
		obj["apiVersion"] = api.CalicoAPIVersion
		if spec, ok := obj["spec"].(map[string]any); ok {
			if v, ok := spec["logSeverity"]; ok {
				spec["logSeverityScreen"] = v
				delete(spec, "logSeverity")
			}
		}
		raw, _ = json.Marshal(obj)
		kv[fmt.Sprintf("/calico/resources/v3/projectcalico.org/%s/%s", r.GetKind().Plural(), r.Meta().Name)] = string(raw)
	}

	pool := netip.MustParsePrefix(l.Topo.PoolCIDR).Masked()
	vxlan := l.Topo.VXLANMode != "" && l.Topo.VXLANMode != "Never"
	tunnelled := map[string]bool{}
	var out []Pod
	for i, p := range pods {
		a := pool.Addr().As4()
		a[2] += byte(i + 1)
		block := netip.PrefixFrom(netip.AddrFrom4(a), 26)
		a[3]++
		addr := netip.AddrFrom4(a)
		ns := fmt.Sprintf("%s-p-%s", l.Topo.Prefix, p.Name)
		sum := sha512.Sum512([]byte("/var/run/netns/" + ns))
		cid := fmt.Sprintf("cnitool-%x", sum[:10])
		handle := "k8s-pod-network." + cid
		veth := kernel.HostDeviceName("default", p.Name, "") // Calico names it the same
		dash := func(s string) string { return strings.ReplaceAll(s, "-", "--") }
		blockKey := strings.Replace(block.String(), "/", "-", 1)

		// On a VXLAN pool, the node's first block also holds its VXLAN
		// tunnel address at ordinal 0, as calico-node allocates it.
		tunnel := vxlan && !tunnelled[p.Node]
		tunnelled[p.Node] = tunnelled[p.Node] || tunnel
		allocs := make([]string, 64)
		var unalloc []string
		for o := range allocs {
			switch {
			case o == 1:
				allocs[o] = "0"
			case o == 0 && tunnel:
				allocs[o] = "1"
			default:
				allocs[o] = "null"
				unalloc = append(unalloc, fmt.Sprint(o))
			}
		}
		attrs := fmt.Sprintf(`{"handle_id":%q,"secondary":{"namespace":"default","node":%q,"pod":%q,"timestamp":"2024-05-03 09:00:00.123456789 +0000 UTC"}}`, handle, p.Node, p.Name)
		if tunnel {
			if err := l.seedCalicoVXLAN(ctx, kv, p.Node, block); err != nil {
				return nil, err
			}
			attrs += fmt.Sprintf(`,{"handle_id":"vxlan-tunnel-addr-%s","secondary":{"node":%q,"type":"vxlanTunnelAddress"}}`, p.Node, p.Node)
		}
		kv["/calico/ipam/v2/assignment/ipv4/block/"+blockKey] = fmt.Sprintf(`{"cidr":%q,"affinity":"host:%s","strictAffinity":false,"allocations":[%s],"unallocated":[%s],"attributes":[%s],"deleted":false,"sequenceNumber":2,"sequenceNumberForAllocation":{"1":1}}`,
			block, p.Node, strings.Join(allocs, ","), strings.Join(unalloc, ","), attrs)
		kv[fmt.Sprintf("/calico/ipam/v2/host/%s/ipv4/block/%s", p.Node, blockKey)] = `{"state":"confirmed","deleted":false}`
		kv["/calico/ipam/v2/handle/"+handle] = fmt.Sprintf(`{"handleID":%q,"block":{%q:1},"deleted":false}`, handle, block)
		wep := fmt.Sprintf("%s-k8s-%s-eth0", dash(p.Node), dash(p.Name))
		kv["/calico/resources/v3/projectcalico.org/workloadendpoints/default/"+wep] = fmt.Sprintf(`{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":%q,"namespace":"default","labels":{"app":%q,"projectcalico.org/namespace":"default","projectcalico.org/orchestrator":"k8s"}},"spec":{"orchestrator":"k8s","node":%q,"containerID":%q,"pod":%q,"endpoint":"eth0","ipNetworks":["%s/32"],"profiles":["kns.default"],"interfaceName":%q}}`,
			wep, p.Name, p.Node, cid, p.Name, addr, veth)

		for _, c := range [][]string{
			{"", "netns", "add", ns},
			{p.Node, "link", "add", veth, "address", "ee:ee:ee:ee:ee:ee", "type", "veth", "peer", "name", "eth0", "netns", ns},
			{ns, "addr", "add", addr.String() + "/32", "dev", "eth0"},
			{ns, "link", "set", "eth0", "up"},
			{ns, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link"},
			{ns, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0"},
			{p.Node, "link", "set", veth, "up"},
			{p.Node, "route", "add", addr.String() + "/32", "dev", veth, "scope", "link"},
		} {
			if err := ip(ctx, c[0], c[1:]...); err != nil {
				return nil, fmt.Errorf("calico pod %s: ip %v: %w", p.Name, c, err)
			}
		}
		if _, err := nsRun(ctx, p.Node, "sysctl", "-qw", "net.ipv4.conf."+veth+".proxy_arp=1", "net.ipv4.neigh."+veth+".proxy_delay=0"); err != nil {
			return nil, err
		}
		pod := Pod{Name: p.Name, Node: p.Node, NS: ns, ContainerID: cid, IP: addr.String()}
		l.pods = append(l.pods, pod)
		out = append(out, pod)
	}
	for k, v := range kv {
		if _, err := ds.Etcd().Put(ctx, k, v); err != nil {
			return nil, fmt.Errorf("seed Calico key %s: %w", k, err)
		}
	}
	return out, nil
}

// seedCalicoVXLAN gives a Calico node its VXLAN tunnel: the address
// (ordinal 0 of block) with its handle and on the Node (spec
// ipv4VXLANTunnelAddr and vxlanTunnelMACAddr), and the vxlan.calico
// device calico-node leaves on the host (VNI 4096, port 4789).
func (l *Lab) seedCalicoVXLAN(ctx context.Context, kv map[string]string, node string, block netip.Prefix) error {
	addr := block.Addr()
	a := addr.As4()
	mac := fmt.Sprintf("66:c4:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3])
	handle := "vxlan-tunnel-addr-" + node
	kv["/calico/ipam/v2/handle/"+handle] = fmt.Sprintf(`{"handleID":%q,"block":{%q:1},"deleted":false}`, handle, block)
	key := "/calico/resources/v3/projectcalico.org/nodes/" + node
	var obj map[string]any
	if err := json.Unmarshal([]byte(kv[key]), &obj); err != nil {
		return fmt.Errorf("calico node %s: %w", node, err)
	}
	spec, _ := obj["spec"].(map[string]any)
	spec["ipv4VXLANTunnelAddr"], spec["vxlanTunnelMACAddr"] = addr.String(), mac
	raw, _ := json.Marshal(obj)
	kv[key] = string(raw)
	n, err := l.node(node)
	if err != nil {
		return err
	}
	for _, c := range [][]string{
		{"link", "add", "vxlan.calico", "address", mac, "type", "vxlan", "id", "4096", "dstport", "4789", "local", n.Addr.Addr().String(), "dev", "eth0", "nolearning"},
		{"addr", "add", addr.String() + "/32", "dev", "vxlan.calico"},
		{"link", "set", "vxlan.calico", "up"},
	} {
		if err := ip(ctx, node, c...); err != nil {
			return fmt.Errorf("calico node %s: ip %v: %w", node, c, err)
		}
	}
	return nil
}

// ClearCalicoDataplane does on a node what docs/migrate-calico.md says to
// do before routed starts there: delete vxlan.calico (its routes go with
// it) and flush BIRD's routes.
func (l *Lab) ClearCalicoDataplane(ctx context.Context, node string) error {
	if _, err := nsRun(ctx, node, "ip", "link", "show", "vxlan.calico"); err == nil {
		if err := ip(ctx, node, "link", "del", "vxlan.calico"); err != nil {
			return err
		}
	}
	return ip(ctx, node, "route", "flush", "proto", "bird")
}

// NodeAddrs returns `ip -4 -o addr show` of a node's namespace.
func (l *Lab) NodeAddrs(ctx context.Context, node string) (string, error) {
	return nsRun(ctx, node, "ip", "-4", "-o", "addr", "show")
}
