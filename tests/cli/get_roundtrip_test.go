package cli

import (
	"strings"
	"testing"
)

// roundTripFixtures are resources whose table names are given back to
// `get`: two pods named pod11 in two namespaces, one of them with two
// interfaces, so a NAMESPACE/POD must pick every interface of that pod
// and nothing of the other.
const roundTripFixtures = `apiVersion: routed.io/v1
kind: IPPool
metadata: {name: rt-pool}
spec: {cidr: 10.77.0.0/16}
---
apiVersion: routed.io/v1
kind: Node
metadata: {name: rt-node1}
spec: {bgp: {ipv4Address: 10.0.0.11/24}}
---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: rt--node1-k8s-default-pod11-eth0}
spec: {node: rt-node1, namespace: default, pod: pod11, containerID: c11, interfaceName: cali11a, ipNetworks: [10.77.0.1/32]}
---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: rt--node1-k8s-default-pod11-net1}
spec: {node: rt-node1, namespace: default, pod: pod11, containerID: c11, interfaceName: cali11b, ipNetworks: [10.77.0.2/32]}
---
apiVersion: routed.io/v1
kind: WorkloadEndpoint
metadata: {name: rt--node1-k8s-kube--system-pod11-eth0}
spec: {node: rt-node1, namespace: kube-system, pod: pod11, containerID: c12, interfaceName: cali12, ipNetworks: [10.77.0.3/32]}
`

// firstColumn is the first column of every row of a `get` table.
func firstColumn(t *testing.T, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) < 2 {
		t.Fatalf("a table with no rows:\n%s", table)
	}
	var out []string
	for _, l := range lines[1:] {
		out = append(out, strings.Fields(l)[0])
	}
	return out
}

// TestGetNamesRoundTrip: every name `routedctl get KIND` prints can be
// given back to `routedctl get KIND NAME`; for workloadendpoints that is
// the WORKLOAD column's NAMESPACE/POD, which names every interface of
// that pod and no other pod's.
func TestGetNamesRoundTrip(t *testing.T) {
	ep := startEtcd(t)
	if out, errOut, code := ctl(t, ep, roundTripFixtures, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	for _, kind := range []string{"ippools", "nodes", "workloadendpoints"} {
		table, errOut, code := ctl(t, ep, "", "get", kind)
		if code != 0 {
			t.Fatalf("get %s: exit %d: %s", kind, code, errOut)
		}
		for _, name := range firstColumn(t, table) {
			if out, errOut, code := ctl(t, ep, "", "get", kind, name, "-o", "yaml"); code != 0 {
				t.Errorf("get %s lists %q, but get %s %s: exit %d: %s%s", kind, name, kind, name, code, out, errOut)
			}
		}
	}

	wants := map[string][]string{
		"default/pod11":     {"rt--node1-k8s-default-pod11-eth0", "rt--node1-k8s-default-pod11-net1"},
		"kube-system/pod11": {"rt--node1-k8s-kube--system-pod11-eth0"},
	}
	table, _, _ := ctl(t, ep, "", "get", "workloadendpoints")
	if got := firstColumn(t, table); len(got) != 3 || got[0] != "default/pod11" || got[2] != "kube-system/pod11" {
		t.Fatalf("get workloadendpoints printed %q, want default/pod11 twice and kube-system/pod11", got)
	}
	for _, args := range [][]string{
		{"workloadendpoint", "default/pod11"},
		{"wep", "-n", "default", "pod11"},
		{"workloadendpoints", "kube-system/pod11"},
	} {
		out, errOut, code := ctl(t, ep, "", append(append([]string{"get"}, args...), "-o", "yaml")...)
		if code != 0 {
			t.Fatalf("get %v: exit %d: %s", args, code, errOut)
		}
		ref := args[len(args)-1]
		if !strings.Contains(ref, "/") {
			ref = "default/" + ref
		}
		for _, name := range wants[ref] {
			if !strings.Contains(out, "name: "+name+"\n") {
				t.Errorf("get %v: %s missing:\n%s", args, name, out)
			}
		}
		if n := strings.Count(out, "kind: WorkloadEndpoint"); n != len(wants[ref]) {
			t.Errorf("get %v: %d endpoints, want %d:\n%s", args, n, len(wants[ref]), out)
		}
	}

	// -n narrows a list to one namespace's pods.
	if out, _, code := ctl(t, ep, "", "get", "wep", "-n", "kube-system"); code != 0 || strings.Contains(out, "default/") || !strings.Contains(out, "kube-system/pod11") {
		t.Errorf("get wep -n kube-system: exit %d:\n%s", code, out)
	}
	// The datastore name still works.
	if out, errOut, code := ctl(t, ep, "", "get", "wep", "rt--node1-k8s-default-pod11-net1"); code != 0 || !strings.Contains(out, "cali11b") {
		t.Errorf("get wep by datastore name: exit %d: %s%s", code, out, errOut)
	}
	// Errors name what was asked.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "wep", "default/nope"}, []string{`"default/nope"`, "not found"}},
		{[]string{"get", "wep", "default/pod11", "-n", "other"}, []string{`names namespace "default" but -n says "other"`}},
		{[]string{"get", "wep", "default/"}, []string{"NAMESPACE/POD"}},
	} {
		_, errOut, code := ctl(t, ep, "", c.args...)
		if code == 0 {
			t.Errorf("%v: exit 0, want an error", c.args)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q does not say %q", c.args, errOut, w)
			}
		}
	}
}
