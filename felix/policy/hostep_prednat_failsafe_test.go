package policy_test

import (
	"fmt"
	"testing"

	"github.com/routed-net/routed/felix/policy/internal/polab"
	"github.com/routed-net/routed/pkg/api"
)

// TestPreDNATDenyNotBypassedBySourcePort: a preDNAT Deny of a NodePort
// holds against a client that connects from a failsafe port (179, BGP's)
// as from any other: the failsafe source-port rules, which let replies
// through before conntrack, belong to the raw chains only.
func TestPreDNATDenyNotBypassedBySourcePort(t *testing.T) {
	h := newHostLab(t)
	polab.Nft(t, h.node.NS, fmt.Sprintf(`
table ip nodeport {
	chain pre {
		type nat hook prerouting priority -100
		tcp dport 30080 dnat to %s:8080
	}
}
`, h.pods["a"].IPv4))
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"}, api.DefaultAllowProfile)
	h.load(`
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: nodeport}
spec:
  selector: role == 'edge'
  preDNAT: true
  applyOnForward: true
  ingress: [{action: Deny, protocol: TCP, destination: {ports: [30080]}}]
`)
	h.apply()
	dst := h.x.NodeAddr(false)
	polab.Expect(t, h.x.NS, polab.Probe{Proto: "tcp", Dst: dst, Port: 30080}, false, "preDNAT deny, ephemeral source port")
	polab.Expect(t, h.x.NS, polab.Probe{Proto: "tcp", Dst: dst, Port: 30080, SrcPort: 179}, false, "preDNAT deny, source port 179")
	polab.Expect(t, h.x.NS, polab.Probe{Proto: "tcp", Dst: h.pods["a"].IPv4, Port: 8080, SrcPort: 179}, true, "the pod itself, not denied")
}
