package cli

import (
	"maps"
	"strconv"
	"strings"
	"testing"
)

// TestMigrateCalicoDualStack: a dual-stack Calico cluster (an IPv6 pool,
// a node's ipv6Address, an IPv6 block with the pod's second address, an
// endpoint holding both) is carried over whole: the pod's IPv6 address
// stays allocated to its handle, so no new pod can be given it, and
// ipam check is clean. (Before, the IPv6 block was left behind while
// the pool was carried: the pod's address would have been free.)
func TestMigrateCalicoDualStack(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	kv := maps.Clone(calicoDatastore)
	allocs := []string{"0"}
	unalloc := []string{}
	for i := 1; i < 64; i++ {
		allocs = append(allocs, "null")
		unalloc = append(unalloc, strconv.Itoa(i))
	}
	kv["/calico/resources/v3/projectcalico.org/ippools/default-ipv6-ippool"] = `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv6-ippool"},"spec":{"cidr":"fd00:10:244::/48","vxlanMode":"Never","ipipMode":"Never","natOutgoing":false,"blockSize":122,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"]}}`
	kv["/calico/resources/v3/projectcalico.org/nodes/node-a"] = strings.Replace(kv["/calico/resources/v3/projectcalico.org/nodes/node-a"], `"ipv4Address":"10.0.0.11/24",`, `"ipv4Address":"10.0.0.11/24","ipv6Address":"fd00:10::11/64",`, 1)
	kv["/calico/resources/v3/projectcalico.org/workloadendpoints/default/node--a-k8s-web--1-eth0"] = strings.Replace(kv["/calico/resources/v3/projectcalico.org/workloadendpoints/default/node--a-k8s-web--1-eth0"], `"ipNetworks":["10.244.1.1/32"]`, `"ipNetworks":["10.244.1.1/32","fd00:10:244:0:1::/128"]`, 1)
	kv["/calico/ipam/v2/assignment/ipv6/block/fd00:10:244:0:1::-122"] = `{"cidr":"fd00:10:244:0:1::/122","affinity":"host:node-a","strictAffinity":false,"allocations":[` + strings.Join(allocs, ",") +
		`],"unallocated":[` + strings.Join(unalloc, ",") + `],"attributes":[{"handle_id":"k8s-pod-network.1f2e3d4c5b6a","secondary":{"namespace":"default","node":"node-a","pod":"web-1"}}],"deleted":false,"sequenceNumber":1}`
	kv["/calico/ipam/v2/host/node-a/ipv6/block/fd00:10:244:0:1::-122"] = `{"state":"confirmed","deleted":false}`
	kv["/calico/ipam/v2/handle/k8s-pod-network.1f2e3d4c5b6a"] = `{"handleID":"k8s-pod-network.1f2e3d4c5b6a","block":{"10.244.1.0/26":1,"fd00:10:244:0:1::/122":1},"deleted":false}`
	putKeys(t, ep, kv)

	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "0 not carried over") {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "ipam", "check")
	if code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check: code %d\n%s%s", code, out, errOut)
	}
	out, _, _ = ctl(t, ep, "", "ipam", "show", "--ip", "fd00:10:244:0:1::")
	if !strings.Contains(out, "k8s-pod-network.1f2e3d4c5b6a") {
		t.Errorf("the pod's IPv6 address is not held by its Calico handle:\n%s", out)
	}
	out, _, _ = ctl(t, ep, "", "get", "node", "node-a", "-o", "yaml")
	if !strings.Contains(out, "ipv6Address: fd00:10::11/64") {
		t.Errorf("node-a lost its ipv6Address:\n%s", out)
	}
}
