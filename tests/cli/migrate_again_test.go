package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestMigrateCalicoAgainCarriesNewPods: a pod Calico starts after the
// first migration (a new address in an already migrated block, its
// handle and endpoint) is carried by the next run, which leaves the rest
// alone; ipam check stays clean.
func TestMigrateCalicoAgainCarriesNewPods(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	putKeys(t, ep, calicoDatastore)
	if out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep); code != 0 {
		t.Fatalf("first run: code %d\n%s%s", code, out, errOut)
	}
	// Calico gives ordinal 2 of node-a's block to a new pod.
	block := calicoBlock("10.244.1.0/26", "node-a", "ipip-tunnel-addr-node-a", "k8s-pod-network.1f2e3d4c5b6a", "default")
	block = strings.Replace(block, `"allocations":[0,1,null`, `"allocations":[0,1,2`, 1)
	block = strings.Replace(block, `"unallocated":[2,`, `"unallocated":[`, 1)
	block = strings.Replace(block, `}}],"deleted"`, `}},{"handle_id":"k8s-pod-network.77c0ffee0002","secondary":{"namespace":"default","node":"node-a","pod":"web-2","timestamp":"2024-05-04 09:00:00 +0000 UTC"}}],"deleted"`, 1)
	if !strings.Contains(block, `"allocations":[0,1,2,null`) || !strings.Contains(block, "web-2") {
		t.Fatalf("block edit did not apply: %s", block)
	}
	putKeys(t, ep, map[string]string{
		"/calico/ipam/v2/assignment/ipv4/block/10.244.1.0-26":                                      block,
		"/calico/ipam/v2/handle/k8s-pod-network.77c0ffee0002":                                      `{"handleID":"k8s-pod-network.77c0ffee0002","block":{"10.244.1.0/26":1},"deleted":false}`,
		"/calico/resources/v3/projectcalico.org/workloadendpoints/default/node--a-k8s-web--2-eth0": `{"kind":"WorkloadEndpoint","apiVersion":"projectcalico.org/v3","metadata":{"name":"node--a-k8s-web--2-eth0","namespace":"default","labels":{"app":"web"}},"spec":{"orchestrator":"k8s","node":"node-a","containerID":"77c0ffee0002","pod":"web-2","endpoint":"eth0","ipNetworks":["10.244.1.2/32"],"profiles":["kns.default"],"interfaceName":"cali77c0ffee002"}}`,
	})
	out, errOut, code := ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "Migrated: 1 to create, 1 to update, 8 unchanged, 0 conflicts") || !regexp.MustCompile(`10\.244\.1\.0/26 \(node-a\) +update`).MatchString(out) {
		t.Fatalf("second run: code %d\n%s%s", code, out, errOut)
	}
	t.Logf("second run:\n%s", out)
	out, _, _ = ctl(t, ep, "", "ipam", "show", "--ip", "10.244.1.2")
	if !strings.Contains(out, "k8s-pod-network.77c0ffee0002") {
		t.Errorf("the new pod's address is not held by its handle:\n%s", out)
	}
	if out, errOut, code := ctl(t, ep, "", "ipam", "check"); code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Errorf("ipam check: code %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = ctl(t, ep, "", "migrate", "calico", "--from-etcd", ep)
	if code != 0 || !strings.Contains(out, "Migrated: 0 to create, 0 to update, 10 unchanged, 0 conflicts") {
		t.Fatalf("third run is not a no-op: code %d\n%s%s", code, out, errOut)
	}
}
