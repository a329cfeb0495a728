package policy_test

import (
	"fmt"
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestHostEndpointWildcardPreDNATAllow: what a "*" preDNAT policy lets
// through (which since the "*" preDNAT policies see pods' packets can
// be a pod's traffic) does not skip the policies a preDNAT Allow must
// not skip (the security review of 5bd5892):
//   - a pod's traffic to its host still meets the "*" endpoint's
//     ingress policy (routed's rule for pod-to-host traffic);
//   - the forwarded traffic still meets the outgoing interface's
//     applyOnForward egress policy (Calico's to-host-endpoint forward
//     dispatch is unconditional and clears the accept bit);
//   - a preDNAT Deny of an address does not drop the replies of
//     connections to or from it (established first, as Calico's mangle
//     PREROUTING).
func TestHostEndpointWildcardPreDNATAllow(t *testing.T) {
	h := newHostLab(t)
	h.hep("node-all", "*", map[string]string{"host": "node"}, api.DefaultAllowProfile)
	allowPods := gnp("prednat-allow-pods", wildcardAOF+"  preDNAT: true\n  ingress: [{action: Allow, source: {selector: has(app)}}]")
	h.with(allowPods+gnp("host-from-a", "  selector: host == 'node'\n  types: [Ingress]\n  ingress: [{action: Allow, source: {selector: app == 'a'}}]"),
		"* preDNAT allows the pods, * ingress only pod a",
		hpass("a", "host", "tcp", 80), hdrop("b", "host", "tcp", 80))

	xNets := fmt.Sprintf("[%s/32, %s/128]", h.x.Addr(false), h.x.Addr(true))
	h.with(gnp("prednat-allow-x", wildcardAOF+"  preDNAT: true\n  ingress: [{action: Allow, source: {nets: "+xNets+"}}]")+
		gnp("fwd-to-a", wildcardAOF+"  types: [Egress]\n  egress: [{action: Allow, destination: {selector: app == 'a'}}]"),
		"* preDNAT allows x, * applyOnForward egress only to pod a",
		hpass("x", "a", "tcp", 8080), hdrop("x", "b", "tcp", 8080))

	h.with(gnp("prednat-deny-to-x", wildcardAOF+"  preDNAT: true\n  ingress: [{action: Deny, destination: {nets: "+xNets+"}}, {action: Allow}]"),
		"* preDNAT denies packets to x: x's connections are answered",
		hpass("x", "a", "tcp", 8080), hpass("x", "host", "tcp", 80), hdrop("b", "x", "tcp", 80))
	h.with(gnp("prednat-deny-from-x", wildcardAOF+"  preDNAT: true\n  ingress: [{action: Deny, source: {nets: "+xNets+"}}, {action: Allow}]"),
		"* preDNAT denies packets from x: connections to x are answered",
		hpass("host", "x", "tcp", 80), hpass("a", "x", "tcp", 80), hdrop("x", "host", "tcp", 80), hdrop("x", "a", "tcp", 8080))
}
