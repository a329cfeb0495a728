package lab

import (
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
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
	ds, err := datastore.New(datastore.Config{Endpoints: []string{l.Topo.EtcdEndpoint()}, Dialer: dialIn(h)})
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
		veth := calicoVeth("default", p.Name)
		dash := func(s string) string { return strings.ReplaceAll(s, "-", "--") }
		blockKey := strings.Replace(block.String(), "/", "-", 1)

		allocs := make([]string, 64)
		var unalloc []string
		for o := range allocs {
			allocs[o] = "null"
			if o == 1 {
				allocs[o] = "0"
			} else {
				unalloc = append(unalloc, fmt.Sprint(o))
			}
		}
		kv["/calico/ipam/v2/assignment/ipv4/block/"+blockKey] = fmt.Sprintf(`{"cidr":%q,"affinity":"host:%s","strictAffinity":false,"allocations":[%s],"unallocated":[%s],"attributes":[{"handle_id":%q,"secondary":{"namespace":"default","node":%q,"pod":%q,"timestamp":"2024-05-03 09:00:00.123456789 +0000 UTC"}}],"deleted":false,"sequenceNumber":2,"sequenceNumberForAllocation":{"1":1}}`,
			block, p.Node, strings.Join(allocs, ","), strings.Join(unalloc, ","), handle, p.Node, p.Name)
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

// calicoVeth is Calico's host-side device name for a pod.
func calicoVeth(namespace, pod string) string {
	sum := sha1.Sum([]byte(namespace + "." + pod))
	return "cali" + hex.EncodeToString(sum[:])[:11]
}
