package policy_test

import (
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
	h.nodePort()
	h.hep("node-eth1", "eth1", map[string]string{"role": "edge"}, api.DefaultAllowProfile)
	h.load(preDNATPolicy("Deny", 30080))
	h.apply()
	dst := h.x.NodeAddr(false)
	polab.Expect(t, h.x.NS, polab.Probe{Proto: "tcp", Dst: dst, Port: 30080}, false, "preDNAT deny, ephemeral source port")
	polab.Expect(t, h.x.NS, polab.Probe{Proto: "tcp", Dst: dst, Port: 30080, SrcPort: 179}, false, "preDNAT deny, source port 179")
	polab.Expect(t, h.x.NS, polab.Probe{Proto: "tcp", Dst: h.pods["a"].IPv4, Port: 8080, SrcPort: 179}, true, "the pod itself, not denied")
}
