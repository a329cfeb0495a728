package policy_test

import "testing"

// TestRenamedEndpointKeepsItsInterfaceOpen: a pod's endpoint set under a
// new name on the same interface, and the old name deleted after it,
// leaves the pod reachable, with real traffic both ways over IPv4 and
// IPv6: the old endpoint's removal used to delete the interface's
// dispatch, and the pod's packets were dropped as an unknown
// interface's until its endpoint changed again. The pod's policy (TCP
// 8080 in only) still holds after the rename: 9090 stays dropped.
func TestRenamedEndpointKeepsItsInterfaceOpen(t *testing.T) {
	l := newLab(t)
	l.load(`
apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: b-web-only, namespace: prod}
spec:
  selector: app == 'b'
  types: [Ingress]
  ingress: [{action: Allow, protocol: TCP, destination: {ports: [8080]}}]
`)
	l.apply()
	probes := append(both(pass("a", "b", "tcp", 8080)), both(pass("b", "a", "tcp", 8080))...)
	probes = append(probes, both(drop("a", "b", "tcp", 9090))...)
	l.expect("before", probes...)
	old := l.eps["b"]
	renamed := old
	renamed.Key = "node-k8s-prod-b-net1"
	if err := l.m.SetEndpoint(renamed); err != nil {
		t.Fatal(err)
	}
	l.m.DeleteEndpoint(old.Key)
	l.apply()
	l.expect("renamed", probes...)
}
