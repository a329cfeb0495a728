package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// calicoDatastore is a small Calico cluster as Calico's etcdv3 backend
// stores it (libcalico-go's key layout and JSON; written by this test,
// not by Calico's code): a pool, BGP configuration, a ToR peer, two
// nodes, each with a confirmed /26 holding its IPIP tunnel address and
// one pod, the pods' endpoints and handles.
var calicoDatastore = map[string]string{
	"/calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool":                       `{"kind":"IPPool","apiVersion":"projectcalico.org/v3","metadata":{"name":"default-ipv4-ippool","uid":"6a1f5f0e-1f2e-4d6b-9a55-2f6f1f7c2b10","creationTimestamp":"2024-05-01T10:00:00Z"},"spec":{"cidr":"10.244.0.0/16","vxlanMode":"Never","ipipMode":"Always","natOutgoing":true,"blockSize":26,"nodeSelector":"all()","allowedUses":["Workload","Tunnel"]}}`,
	"/calico/resources/v3/projectcalico.org/bgpconfigurations/default":                         `{"kind":"BGPConfiguration","apiVersion":"projectcalico.org/v3","metadata":{"name":"default","uid":"0c3d3e0b-6a6d-4f77-8f6d-1a2b3c4d5e6f","creationTimestamp":"2024-05-01T10:00:00Z"},"spec":{"logSeverityScreen":"Info","nodeToNodeMeshEnabled":true,"asNumber":64512}}`,
	"/calico/resources/v3/projectcalico.org/bgppeers/rack1-tor":                                `{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"rack1-tor","uid":"a5b1e0f4-8f67-4c1c-9d2e-3f4a5b6c7d8e","creationTimestamp":"2024-05-02T11:00:00Z"},"spec":{"peerIP":"10.0.0.1","asNumber":64567,"nodeSelector":"rack == 'rack-1'"}}`,
	"/calico/resources/v3/projectcalico.org/nodes/node-a":                                      `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-a","uid":"2f9a","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"kubernetes.io/hostname":"node-a","rack":"rack-1"}},"spec":{"bgp":{"ipv4Address":"10.0.0.11/24","ipv4IPIPTunnelAddr":"10.244.1.0"},"orchRefs":[{"nodeName":"node-a","orchestrator":"k8s"}]},"status":{}}`,
	"/calico/resources/v3/projectcalico.org/nodes/node-b":                                      `{"kind":"Node","apiVersion":"projectcalico.org/v3","metadata":{"name":"node-b","uid":"3e8b","creationTimestamp":"2024-05-01T10:00:00Z","labels":{"kubernetes.io/hostname":"node-b","rack":"rack-1"}},"spec":{"bgp":{"ipv4Address":"10.0.0.12/24","ipv4IPIPTunnelAddr":"10.244.2.64"},"orchRefs":[{"nodeName":"node-b","orchestrator":"k8s"}]},"status":{}}`,
	"/calico/resources/v3/projectcalico.org/workloadendpoints/default/node--a-k8s-web--1-eth0": `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node--a-k8s-web--1-eth0","namespace":"default","uid":"77aa","creationTimestamp":"2024-05-03T09:00:00Z","labels":{"app":"web","projectcalico.org/namespace":"default","projectcalico.org/orchestrator":"k8s","projectcalico.org/serviceaccount":"default"}},"spec":{"orchestrator":"k8s","node":"node-a","containerID":"1f2e3d4c5b6a","pod":"web-1","endpoint":"eth0","serviceAccountName":"default","ipNetworks":["10.244.1.1/32"],"profiles":["kns.default","ksa.default.default"],"interfaceName":"cali5f1a2b3c4d5","mac":"8a:1b:2c:3d:4e:5f"}}`,
	"/calico/resources/v3/projectcalico.org/workloadendpoints/shop/node--b-k8s-web--1-eth0":    `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node--b-k8s-web--1-eth0","namespace":"shop","uid":"88bb","creationTimestamp":"2024-05-03T09:00:01Z","labels":{"app":"web","projectcalico.org/namespace":"shop","projectcalico.org/orchestrator":"k8s"}},"spec":{"orchestrator":"k8s","node":"node-b","containerID":"6a5b4c3d2e1f","pod":"web-1","endpoint":"eth0","ipNetworks":["10.244.2.65/32"],"profiles":["kns.shop"],"interfaceName":"cali9e8d7c6b5a4","mac":"8a:1b:2c:3d:4e:60"}}`,
	"/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26":                                      calicoBlock("10.244.1.0/26", "node-a", "ipip-tunnel-addr-node-a", "k8s-pod-network.1f2e3d4c5b6a", "default"),
	"/calico/ipam/v2/assignment/ipv4/block/10.244.2.64-26":                                     calicoBlock("10.244.2.64/26", "node-b", "ipip-tunnel-addr-node-b", "k8s-pod-network.6a5b4c3d2e1f", "shop"),
	"/calico/ipam/v2/host/node-a/ipv4/block/10.244.1.0-26":                                     `{"state":"confirmed","deleted":false}`,
	"/calico/ipam/v2/host/node-b/ipv4/block/10.244.2.64-26":                                    `{"state":"confirmed","deleted":false}`,
	"/calico/ipam/v2/handle/ipip-tunnel-addr-node-a":                                           `{"handleID":"ipip-tunnel-addr-node-a","block":{"10.244.1.0/26":1},"deleted":false}`,
	"/calico/ipam/v2/handle/ipip-tunnel-addr-node-b":                                           `{"handleID":"ipip-tunnel-addr-node-b","block":{"10.244.2.64/26":1},"deleted":false}`,
	"/calico/ipam/v2/handle/k8s-pod-network.1f2e3d4c5b6a":                                      `{"handleID":"k8s-pod-network.1f2e3d4c5b6a","block":{"10.244.1.0/26":1},"deleted":false}`,
	"/calico/ipam/v2/handle/k8s-pod-network.6a5b4c3d2e1f":                                      `{"handleID":"k8s-pod-network.6a5b4c3d2e1f","block":{"10.244.2.64/26":1},"deleted":false}`,
}

// calicoBlock is an AllocationBlock with ordinal 0 the node's IPIP
// tunnel address and ordinal 1 a pod's.
func calicoBlock(cidr, node, tunnel, pod, ns string) string {
	allocs := []string{"0", "1"}
	unalloc := []string{}
	for i := 2; i < 64; i++ {
		allocs = append(allocs, "null")
		unalloc = append(unalloc, strconv.Itoa(i))
	}
	return `{"cidr":"` + cidr + `","affinity":"host:` + node + `","strictAffinity":false,"allocations":[` + strings.Join(allocs, ",") +
		`],"unallocated":[` + strings.Join(unalloc, ",") + `],"attributes":[{"handle_id":"` + tunnel + `","secondary":{"node":"` + node +
		`","type":"ipipTunnelAddress"}},{"handle_id":"` + pod + `","secondary":{"namespace":"` + ns + `","node":"` + node +
		`","pod":"web-1","timestamp":"2024-05-03 09:00:00.123456789 +0000 UTC"}}],"deleted":false,"sequenceNumber":3,"sequenceNumberForAllocation":{"0":1,"1":2}}`
}

// putKeys writes raw keys into the etcd at ep, as Calico's code would.
func putKeys(t *testing.T, ep string, kv map[string]string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for k, v := range kv {
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigrateCalico: `routedctl migrate calico --from-etcd` plans
// (--dry-run writes nothing), carries pools, BGP settings, peers, nodes,
// endpoints and IPAM state over (ipam check clean, addresses kept with
// their handles), is a no-op when run again, and refuses to overwrite
// routed state that differs.
func TestMigrateCalico(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	putKeys(t, ep, calicoDatastore)

	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep, "--dry-run")
	if code != 0 || !strings.Contains(out, "Plan: 9 to create, 0 to update, 0 unchanged, 0 conflicts, 0 not carried over") {
		t.Fatalf("dry run: code %d\n%s%s", code, out, errOut)
	}
	t.Logf("plan:\n%s", out)
	// Warnings name the Calico key they come from.
	if w := `Warning: Calico key /calico/resources/v3/projectcalico.org/ippools/default-ipv4-ippool (IPPool default-ipv4-ippool): Calico field spec.allowedUses`; !strings.Contains(errOut, w) {
		t.Errorf("warnings lack %q:\n%s", w, errOut)
	}
	if _, errOut, code := ctl(t, ep, "", "get", "ippool", "default-ipv4-ippool"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Fatalf("the dry run wrote the pool: %d %s", code, errOut)
	}

	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "Migrated: 9 to create") {
		t.Fatalf("migrate: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "ipam", "check")
	if code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check after the migration: code %d\n%s%s", code, out, errOut)
	}
	out, _, _ = ctl(t, ep, "", "ipam", "show", "--ip", "10.244.2.65")
	if !strings.Contains(out, "k8s-pod-network.6a5b4c3d2e1f") {
		t.Errorf("pod address not held by its Calico handle:\n%s", out)
	}
	out, _, _ = ctl(t, ep, "", "get", "wep", "-o", "yaml")
	for _, want := range []string{"name: node--b-k8s-shop-web--1-eth0", "interfaceName: cali9e8d7c6b5a4", "handle: k8s-pod-network.6a5b4c3d2e1f", "namespace: shop", "app: web"} {
		if !strings.Contains(out, want) {
			t.Errorf("endpoints lack %q:\n%s", want, out)
		}
	}
	out, _, _ = ctl(t, ep, "", "get", "bgppeer", "rack1-tor", "-o", "yaml")
	if !strings.Contains(out, "asNumber: 64567") {
		t.Errorf("peer:\n%s", out)
	}

	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "Migrated: 0 to create, 0 to update, 9 unchanged, 0 conflicts") {
		t.Fatalf("second run is not a no-op: code %d\n%s%s", code, out, errOut)
	}

	// routed's copy changed since: the migration names it and writes nothing.
	if _, errOut, code := ctl(t, ep, "apiVersion: routed.io/v1\nkind: BGPPeer\nmetadata: {name: rack1-tor}\nspec: {peerIP: 10.0.0.2, asNumber: 64567}\n", "apply", "-f", "-"); code != 0 {
		t.Fatal(errOut)
	}
	putKeys(t, ep, map[string]string{"/calico/resources/v3/projectcalico.org/bgppeers/rack2-tor": `{"kind":"BGPPeer","apiVersion":"projectcalico.org/v3","metadata":{"name":"rack2-tor"},"spec":{"peerIP":"10.0.1.1","asNumber":64568}}`})
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code == 0 || !strings.Contains(out, "rack1-tor") || !strings.Contains(out, "conflict") || !strings.Contains(errOut, "nothing was written") {
		t.Fatalf("conflict: code %d\n%s%s", code, out, errOut)
	}
	if _, errOut, code := ctl(t, ep, "", "get", "bgppeer", "rack2-tor"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("a conflicting migration wrote rack2-tor: %d %s", code, errOut)
	}
}
