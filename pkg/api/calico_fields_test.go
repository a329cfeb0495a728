package api_test

import (
	"strings"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// calicoRuleFields are the fields of Calico's v3 Rule and EntityRule
// (api/pkg/apis/projectcalico/v3/policy_common.go), each in a rule.
var calicoRuleFields = []string{
	"ingress: [{action: Allow, ipVersion: 4}]", "ingress: [{action: Allow, protocol: TCP}]",
	"ingress: [{action: Allow, protocol: ICMP, icmp: {type: 8, code: 0}}]", "ingress: [{action: Allow, notProtocol: UDP}]",
	"ingress: [{action: Allow, protocol: ICMP, notICMP: {type: 8}}]", "ingress: [{action: Allow, http: {methods: [GET]}}]",
	"ingress: [{action: Allow, metadata: {annotations: {a: b}}}]",
	"egress: [{action: Allow, destination: {nets: [10.0.0.0/8]}}]", "egress: [{action: Allow, destination: {notNets: [10.0.0.0/8]}}]",
	"egress: [{action: Allow, destination: {selector: all()}}]", "egress: [{action: Allow, destination: {notSelector: all()}}]",
	"egress: [{action: Allow, destination: {namespaceSelector: all()}}]", "egress: [{action: Allow, destination: {services: {name: s, namespace: shop}}}]",
	"egress: [{action: Allow, protocol: TCP, destination: {ports: [80]}}]", "egress: [{action: Allow, protocol: TCP, destination: {notPorts: ['1:1024']}}]",
	"egress: [{action: Allow, destination: {serviceAccounts: {names: [a], selector: all()}}}]",
}

// TestEveryCalicoFieldIsClassified sets each field of Calico's v3
// IPPool, BGPPeer, BGPConfiguration, Node, BGPFilter and the policy
// model's kinds (Calico v3.30,
// https://docs.tigera.io/calico/latest/reference/resources/, one field
// at a time on a valid resource) and checks that routed knows it: the
// file applies (honoured, or dropped with a warning) or is refused for a
// reason naming the field, never as an unknown field.
func TestEveryCalicoFieldIsClassified(t *testing.T) {
	kinds := []struct {
		kind, base string
		fields     []string // "path: value" under spec (or top level for status)
	}{
		{"IPPool", "cidr: 10.9.0.0/16", []string{
			"vxlanMode: CrossSubnet", "ipipMode: Always", "natOutgoing: true", "disabled: true", "disableBGPExport: true",
			"blockSize: 28", "nodeSelector: all()", "namespaceSelector: team == 'a'", "allowedUses: [Workload]", "assignmentMode: Manual",
		}},
		{"BGPPeer", "peerIP: 10.0.0.1\n  asNumber: 64512", []string{
			"node: n1", "nodeSelector: all()", "keepOriginalNextHop: true", "nextHopMode: Keep",
			"password: {secretKeyRef: {name: bgp, key: pw}}", "sourceAddress: None", "failureDetectionMode: BFDIfDirectlyConnected",
			"restartMode: LongLivedGracefulRestart", "maxRestartTime: 60s", "birdGatewayMode: DirectIfDirectlyConnected",
			"numAllowedLocalASNumbers: 1", "ttlSecurity: 1", "reachableBy: 10.0.0.254", "filters: [f1]",
			"localWorkloadSelector: app == 'x'", "localASNumber: 64000", "reversePeering: Manual",
		}},
		{"BGPConfiguration", "asNumber: 64512", []string{
			"logSeverityScreen: Debug", "nodeToNodeMeshEnabled: false", "serviceLoadBalancerIPs: [{cidr: 10.10.0.0/24}]",
			"serviceExternalIPs: [{cidr: 10.11.0.0/24}]", "serviceClusterIPs: [{cidr: 10.96.0.0/12}]", "listenPort: 1790",
			"communities: [{name: c, value: '64512:100'}]", "prefixAdvertisements: [{cidr: 10.12.0.0/24, communities: ['64512:1']}]",
			"bindMode: NodeIP", "ignoredInterfaces: [eth9]", "nodeMeshPassword: {secretKeyRef: {name: bgp, key: pw}}",
			"nodeMeshMaxRestartTime: 90s", "localWorkloadPeeringIPV4: 169.254.0.179", "localWorkloadPeeringIPV6: 'fe80::179'",
			"programClusterRoutes: Disabled", "serviceLoadBalancerAggregation: Disabled", "ipv4NormalRoutePriority: 100",
			"ipv6NormalRoutePriority: 100", "ipv4ElevatedRoutePriority: 50", "ipv6ElevatedRoutePriority: 50",
		}},
		{"Node", "bgp: {ipv4Address: 10.0.0.11/24}", []string{
			"bgp: {ipv4Address: 10.0.0.11/24, asNumber: 64513}", "bgp: {ipv4Address: 10.0.0.11/24, ipv6Address: 'fd00::11/64'}",
			"bgp: {ipv4Address: 10.0.0.11/24, ipv4IPIPTunnelAddr: 10.9.0.1}", "bgp: {ipv4Address: 10.0.0.11/24, routeReflectorClusterID: 224.0.0.1}",
			"ipv4VXLANTunnelAddr: 10.9.0.2", "vxlanTunnelMACAddr: '66:2a:0a:09:00:02'", "ipv6VXLANTunnelAddr: 'fd00::2'",
			"vxlanTunnelMACAddrV6: '66:2a:0a:09:00:03'", "orchRefs: [{nodeName: n1, orchestrator: k8s}]",
			"wireguard: {interfaceIPv4Address: 10.9.0.3}", "addresses: [{address: 10.0.0.11/24, type: InternalIP}]",
		}},
		{"BGPFilter", "exportV4: [{action: Accept, matchOperator: In, cidr: 10.0.0.0/8}]", []string{
			"importV4: [{action: Reject, matchOperator: NotIn, cidr: 10.0.0.0/8, prefixLength: {min: 16, max: 24}}]",
			"importV4: [{action: Reject, source: RemotePeers}]", "exportV4: [{action: Reject, interface: '*.calico'}]",
			"exportV6: [{action: Accept, matchOperator: Equal, cidr: 'fd00::/64'}]", "importV6: [{action: Reject}]",
		}},
		{"GlobalNetworkPolicy", "selector: all()", append([]string{
			"tier: default", "order: 10", "types: [Ingress]", "doNotTrack: true", "preDNAT: true", "applyOnForward: true",
			"serviceAccountSelector: all()", "namespaceSelector: all()", "performanceHints: [AssumeNeededOnEveryNode]",
		}, calicoRuleFields...)},
		{"NetworkPolicy", "selector: all()", append([]string{
			"tier: default", "order: 10", "types: [Ingress]", "serviceAccountSelector: all()", "performanceHints: [AssumeNeededOnEveryNode]",
		}, calicoRuleFields...)},
		{"Profile", "labelsToApply: {a: b}", []string{"ingress: [{action: Allow}]", "egress: [{action: Allow}]"}},
		{"Tier", "order: 1000000", []string{"defaultAction: Deny"}},
		{"GlobalNetworkSet", "nets: [10.0.0.0/8]", nil},
		{"NetworkSet", "nets: [10.0.0.0/8]", nil},
	}
	for _, k := range kinds {
		for _, f := range k.fields {
			name := strings.SplitN(f, ":", 2)[0]
			t.Run(k.kind+"/"+name, func(t *testing.T) {
				spec := "  " + f + "\n"
				if !strings.Contains(k.base, name+":") {
					spec = "  " + k.base + "\n" + spec
				}
				doc := "apiVersion: projectcalico.org/v3\nkind: " + k.kind + "\nmetadata: {name: default}\nspec:\n" + spec
				d, err := api.Decode([]byte(doc))
				if err == nil {
					err = d.Resources[0].Validate()
				}
				if err != nil && strings.Contains(err.Error(), "unknown field") {
					t.Fatalf("Calico's %s is unknown to routed: %v\n%s", name, err, doc)
				}
				switch {
				case err != nil:
					t.Logf("refused: %v", err)
				case len(d.Warnings) > 0:
					t.Logf("warned: %q", d.Warnings)
				default:
					t.Logf("honoured")
				}
			})
		}
	}
}
