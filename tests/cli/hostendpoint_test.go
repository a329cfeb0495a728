package cli

import (
	"strings"
	"testing"
)

// TestHostEndpointApplyGet applies Calico's HostEndpoint files and host
// endpoint policies with routedctl as a Calico user would, reads them
// back (table, wide table, YAML that applies again unchanged), and gets
// each bad one refused naming its field.
func TestHostEndpointApplyGet(t *testing.T) {
	t.Parallel()
	ep := startEtcd(t)
	docs := `apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata:
  name: node1-eth0
  labels: {role: webserver, environment: production}
spec:
  interfaceName: eth0
  node: node1
  expectedIPs: [192.168.0.1, 192.168.0.2]
  profiles: [profile1, profile2]
  ports:
  - {name: some-port, port: 1234, protocol: TCP}
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: node2-all}
spec: {node: node2, interfaceName: "*"}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: allow-ssh-prednat}
spec:
  selector: has(role)
  preDNAT: true
  applyOnForward: true
  order: 10
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [22]}}]
`
	if out, errOut, code := ctl(t, ep, docs, "apply", "-f", "-"); code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	table, errOut, code := ctl(t, ep, "", "get", "hostendpoints", "-o", "wide")
	if code != 0 {
		t.Fatalf("get hostendpoints: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"NAME", "NODE", "INTERFACE", "node1-eth0", "node1", "eth0", "192.168.0.1,192.168.0.2", "profile1,profile2", "node2-all", "*"} {
		if !strings.Contains(table, want) {
			t.Errorf("get hostendpoints -o wide: no %q in\n%s", want, table)
		}
	}
	y, errOut, code := ctl(t, ep, "", "get", "hostendpoint", "node1-eth0", "-o", "yaml")
	if code != 0 || !strings.Contains(y, "some-port") || !strings.Contains(y, "webserver") {
		t.Fatalf("get -o yaml: exit %d: %s%s", code, y, errOut)
	}
	if out, errOut, code := ctl(t, ep, y, "apply", "-f", "-"); code != 0 {
		t.Fatalf("the YAML read back does not apply: exit %d\n%s%s", code, out, errOut)
	}
	if y2, _, _ := ctl(t, ep, "", "get", "hostendpoint", "node1-eth0", "-o", "yaml"); withoutVersion(y2) != withoutVersion(y) {
		t.Errorf("applied again, it reads back differently:\n%s\nwas\n%s", y2, y)
	}
	p, _, code := ctl(t, ep, "", "get", "globalnetworkpolicy", "allow-ssh-prednat", "-o", "yaml")
	if code != 0 || !strings.Contains(p, "preDNAT: true") || !strings.Contains(p, "applyOnForward: true") {
		t.Errorf("the preDNAT policy reads back as\n%s", p)
	}
	for _, c := range []struct{ doc, want string }{
		{"apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata: {name: bad}\nspec: {interfaceName: eth0}\n", "spec.node"},
		{"apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata: {name: bad}\nspec: {node: n1}\n", "spec.interfaceName"},
		{"apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: bad}\nspec: {doNotTrack: true, ingress: [{action: Allow}]}\n", "spec.applyOnForward"},
	} {
		out, errOut, code := ctl(t, ep, c.doc, "apply", "-f", "-")
		if code == 0 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("apply %q: exit %d, want refused naming %s:\n%s%s", c.doc, code, c.want, out, errOut)
		}
	}
}

// withoutVersion drops the resourceVersion line (every write bumps it).
func withoutVersion(y string) string {
	var keep []string
	for _, l := range strings.Split(y, "\n") {
		if !strings.Contains(l, "resourceVersion:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}
