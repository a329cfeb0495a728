package api_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestHostEndpointValidate checks Calico's rules for a HostEndpoint:
// each bad input is refused naming its field and why.
func TestHostEndpointValidate(t *testing.T) {
	base := "apiVersion: projectcalico.org/v3\nkind: HostEndpoint\nmetadata:\n  name: node1-eth0\n  labels: {role: gateway}\nspec:\n"
	tests := []struct {
		name, spec string
		refuse     []string // empty: valid
	}{
		{"named", "  node: node1\n  interfaceName: eth0\n  expectedIPs: [10.0.0.1, 'fd00::1']\n  profiles: [projectcalico-default-allow]\n  ports: [{name: ssh, protocol: TCP, port: 22}]", nil},
		{"wildcard", "  node: node1\n  interfaceName: '*'", nil},
		{"by-ips", "  node: node1\n  expectedIPs: [10.0.0.1]", nil},
		{"no-node", "  interfaceName: eth0", []string{"spec.node", "required"}},
		{"no-iface-no-ips", "  node: node1", []string{"spec.interfaceName", "expectedIPs"}},
		{"bad-iface", "  node: node1\n  interfaceName: 'eth 0'", []string{"spec.interfaceName", "interface name"}},
		{"long-iface", "  node: node1\n  interfaceName: abcdefghijklmnop", []string{"spec.interfaceName"}},
		{"pod-iface", "  node: node1\n  interfaceName: cali12345", []string{"spec.interfaceName", "pod"}},
		{"bad-ip", "  node: node1\n  expectedIPs: [10.0.0.0/24]", []string{"spec.expectedIPs[0]", "IP address"}},
		{"zoned-ip", "  node: node1\n  expectedIPs: [10.0.0.1, 'fe80::1%eth1']", []string{"spec.expectedIPs[1]", "zone (%eth1)"}},
		{"bad-profile", "  node: node1\n  interfaceName: eth0\n  profiles: ['Not_A Profile']", []string{"spec.profiles[0]"}},
		{"port-no-name", "  node: node1\n  interfaceName: eth0\n  ports: [{protocol: TCP, port: 22}]", []string{"spec.ports[0].name", "required"}},
		{"port-proto", "  node: node1\n  interfaceName: eth0\n  ports: [{name: p, protocol: ICMP, port: 22}]", []string{"spec.ports[0].protocol"}},
		{"port-zero", "  node: node1\n  interfaceName: eth0\n  ports: [{name: p, protocol: UDP, port: 0}]", []string{"spec.ports[0].port"}},
		{"port-twice", "  node: node1\n  interfaceName: eth0\n  ports: [{name: p, protocol: UDP, port: 1}, {name: p, protocol: UDP, port: 2}]", []string{"spec.ports[1]", "same port"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := api.Decode([]byte(base + tc.spec + "\n"))
			if err == nil {
				err = d.Resources[0].Validate()
			}
			if len(tc.refuse) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want refused naming %q", tc.refuse)
			}
			if !errors.Is(err, api.ErrInvalid) {
				t.Errorf("not ErrInvalid: %v", err)
			}
			for _, m := range tc.refuse {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error does not name %q: %v", m, err)
				}
			}
		})
	}
	t.Run("bad-label", func(t *testing.T) {
		h := &api.HostEndpoint{Metadata: api.ObjectMeta{Name: "h", Labels: map[string]string{"a": "b c"}}, Spec: api.HostEndpointSpec{Node: "n", InterfaceName: "eth0"}}
		if err := h.Validate(); err == nil || !strings.Contains(err.Error(), "metadata.labels.a") {
			t.Fatalf("bad label value: %v", err)
		}
	})
}

// TestHostPolicyFields checks Calico's rules for a
// GlobalNetworkPolicy's host-endpoint fields.
func TestHostPolicyFields(t *testing.T) {
	tests := []struct {
		name, spec string
		refuse     []string
	}{
		{"apply-on-forward", "applyOnForward: true\n  ingress: [{action: Allow}]", nil},
		{"pre-dnat", "preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Deny, protocol: TCP, destination: {ports: [30080]}}]", nil},
		{"do-not-track", "doNotTrack: true\n  applyOnForward: true\n  ingress: [{action: Allow}]\n  egress: [{action: Allow}]", nil},
		{"pre-dnat-needs-forward", "preDNAT: true\n  ingress: [{action: Allow}]", []string{"spec.applyOnForward", "spec.preDNAT"}},
		{"do-not-track-needs-forward", "doNotTrack: true\n  ingress: [{action: Allow}]", []string{"spec.applyOnForward", "spec.doNotTrack"}},
		{"both", "doNotTrack: true\n  preDNAT: true\n  applyOnForward: true\n  ingress: [{action: Allow}]", []string{"spec.preDNAT", "doNotTrack"}},
		{"pre-dnat-egress", "preDNAT: true\n  applyOnForward: true\n  egress: [{action: Allow}]", []string{"spec.egress", "must be empty"}},
		{"pre-dnat-egress-type", "preDNAT: true\n  applyOnForward: true\n  types: [Ingress, Egress]\n  ingress: [{action: Allow}]", []string{"spec.types[1]", "Egress"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := "apiVersion: projectcalico.org/v3\nkind: GlobalNetworkPolicy\nmetadata: {name: p}\nspec:\n  selector: has(host)\n  " + tc.spec + "\n"
			d, err := api.Decode([]byte(doc))
			if err == nil {
				err = d.Resources[0].Validate()
			}
			if len(tc.refuse) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if len(d.Warnings) > 0 {
					t.Errorf("warnings: %q", d.Warnings)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want refused naming %q", tc.refuse)
			}
			for _, m := range tc.refuse {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error does not name %q: %v", m, err)
				}
			}
		})
	}
}
