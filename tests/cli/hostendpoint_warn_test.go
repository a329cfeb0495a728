package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestHostEndpointWarningsThroughRoutedctl: host endpoints that felix
// would not enforce as written are said so where an operator looks:
// `get hostendpoints` warns (on stderr, the table unchanged) of a
// second endpoint for one interface of a node, naming both and the
// interface, and of a doNotTrack policy selecting a "*" endpoint; the
// same interface name on another node is no conflict; `policy explain`
// of a flow to those endpoints' addresses says the address is a host
// endpoint's and gives the warning, in text and in -o json.
func TestHostEndpointWarningsThroughRoutedctl(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	docs := `apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-eth0-b}
spec: {node: node1, interfaceName: eth0, expectedIPs: [192.0.2.1], profiles: [projectcalico-default-allow]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node1-eth0-a}
spec: {node: node1, interfaceName: eth0, expectedIPs: [192.0.2.1]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node2-eth0}
spec: {node: node2, interfaceName: eth0, expectedIPs: [192.0.2.2]}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node3-all, labels: {all: "yes"}}
spec: {node: node3, interfaceName: "*", expectedIPs: [192.0.2.3]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: untracked-ssh}
spec:
  selector: all == 'yes'
  doNotTrack: true
  applyOnForward: true
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [22]}}]
`
	if out, errOut, code := ctl(t, ep, docs, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	table, errOut, code := ctl(t, ep, "", "get", "hostendpoints")
	if code != 0 {
		t.Fatalf("get hostendpoints: exit %d: %s", code, errOut)
	}
	if strings.Contains(table, "warning") || !strings.Contains(table, "node1-eth0-b") {
		t.Errorf("the table holds the endpoints and no warning:\n%s", table)
	}
	shadow := []string{"warning: HostEndpoint node1-eth0-b (node node1, interface eth0) is not enforced", "HostEndpoint node1-eth0-a governs"}
	untracked := []string{"gnp:untracked-ssh", "HostEndpoint node3-all", "ignored"}
	for _, want := range append(shadow, untracked...) {
		if !strings.Contains(errOut, want) {
			t.Errorf("get hostendpoints: stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "node2-eth0") {
		t.Errorf("node2's eth0 is no conflict with node1's:\n%s", errOut)
	}

	out, errOut, code := ctl(t, ep, "", "policy", "explain", "192.0.2.99", "192.0.2.1", "tcp/80")
	if code != 0 {
		t.Fatalf("explain: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range append(shadow, "ingress: the address is host endpoint node1-eth0-a's on node1") {
		if !strings.Contains(out, want) {
			t.Errorf("explain to node1's address lacks %q:\n%s", want, out)
		}
	}
	out, errOut, code = ctl(t, ep, "", "policy", "explain", "192.0.2.99", "192.0.2.3", "tcp/22", "-o", "json")
	if code != 0 {
		t.Fatalf("explain -o json: exit %d\n%s%s", code, out, errOut)
	}
	var res struct {
		HostEndpointWarnings []struct {
			Endpoint          string   `json:"endpoint"`
			Iface             string   `json:"interface"`
			IgnoredDoNotTrack []string `json:"ignoredDoNotTrack"`
		} `json:"hostEndpointWarnings"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("explain -o json: %v\n%s", err, out)
	}
	if w := res.HostEndpointWarnings; len(w) != 1 || w[0].Endpoint != "node3-all" || w[0].Iface != "*" ||
		len(w[0].IgnoredDoNotTrack) != 1 || w[0].IgnoredDoNotTrack[0] != "gnp:untracked-ssh" {
		t.Errorf("explain -o json to node3's address: hostEndpointWarnings %+v, want node3-all's ignored gnp:untracked-ssh\n%s", w, out)
	}
}
