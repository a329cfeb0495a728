package policy_test

import (
	"testing"

	"github.com/routed-net/routed/pkg/api"
)

// TestHostEndpointWildcardPods: a "*" endpoint's applyOnForward and
// preDNAT policies also police the node's pods' forwarded traffic, as
// Calico's do (its forward and pre-DNAT dispatch send every interface no
// named endpoint names to the "*" chains, pods' included; felix's
// hostendpoints FV test "should deny forwarded traffic ... if an AOF
// policy denies it": pod traffic out of eth0 passes the pod's egress
// policy, then the "*" endpoint's applyOnForward ingress and egress
// policy; ep_to_host_action_test: a "*" preDNAT policy needs an allow
// for pod-to-pod traffic). routed left the pods' devices out, so a pod
// got past a "*" applyOnForward or preDNAT policy that denied it.
func TestHostEndpointWildcardPods(t *testing.T) {
	h := newHostLab(t)
	h.hep("node-all", "*", map[string]string{"host": "node"}, api.DefaultAllowProfile)
	h.expect("* with the default-allow profile, no applyOnForward policy",
		hpass("a", "x", "tcp", 80), hpass("b", "x", "tcp", 80), hpass("b", "a", "tcp", 8080), hpass("x", "b", "tcp", 8080))

	h.with(gnp("fwd-from-a", wildcardAOF+"  types: [Ingress]\n  ingress: [{action: Allow, source: {selector: app == 'a'}}]"),
		"* applyOnForward ingress: only from pod a",
		hpass("a", "x", "tcp", 80), hpass("a", "b", "tcp", 8080),
		hdrop("b", "x", "tcp", 80), hdrop("b", "a", "tcp", 8080), hdrop("x", "y", "tcp", 80), hdrop("x", "a", "tcp", 8080),
		// To the host: the policy is also the "*" endpoint's own ingress
		// policy, which routed applies to its pods' traffic to it.
		hpass("a", "host", "tcp", 80), hdrop("b", "host", "tcp", 80), hpass("host", "b", "tcp", 8080))

	h.with(gnp("fwd-to-a", wildcardAOF+"  types: [Egress]\n  egress: [{action: Allow, destination: {selector: app == 'a'}}]"),
		"* applyOnForward egress: only to pod a",
		hpass("x", "a", "tcp", 8080), hpass("b", "a", "tcp", 8080),
		hdrop("x", "b", "tcp", 8080), hdrop("a", "b", "tcp", 8080), hdrop("x", "y", "tcp", 80), hdrop("a", "x", "tcp", 80),
		hpass("host", "b", "tcp", 8080)) // the host to its pods: never policed

	h.with(gnp("prednat-8080", wildcardAOF+"  preDNAT: true\n  ingress: [{action: Deny, protocol: TCP, destination: {ports: [8080]}}]"),
		"* preDNAT denies 8080 from anywhere, pods too",
		hdrop("x", "a", "tcp", 8080), hdrop("b", "a", "tcp", 8080), hdrop("a", "host", "tcp", 8080),
		hpass("b", "x", "tcp", 80), hpass("x", "host", "tcp", 80))
}

// wildcardAOF are the spec lines of an applyOnForward policy selecting
// the lab's "*" endpoint.
const wildcardAOF = "  selector: host == 'node'\n  applyOnForward: true\n"

// with sets the policies of docs, checks the probes, and removes them.
func (h *hostLab) with(docs, why string, ps ...hp) {
	h.t.Helper()
	h.load(docs)
	h.apply()
	h.expect(why, ps...)
	h.loadOrDelete(docs, true)
	h.apply()
}
