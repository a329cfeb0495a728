package policy_test

import "testing"

// TestRenamedEndpointKeepsItsInterfaceOpen: a pod's endpoint set under a
// new name on the same interface, and the old name deleted after it,
// leaves the pod reachable, with real traffic both ways over IPv4 and
// IPv6: the old endpoint's removal used to delete the interface's
// dispatch, and the pod's packets were dropped as an unknown
// interface's until its endpoint changed again.
func TestRenamedEndpointKeepsItsInterfaceOpen(t *testing.T) {
	l := newLab(t)
	l.expect("before", append(both(pass("a", "b", "tcp", 8080)), both(pass("b", "a", "tcp", 8080))...)...)
	old := l.eps["b"]
	renamed := old
	renamed.Key = "node-k8s-prod-b-net1"
	if err := l.m.SetEndpoint(renamed); err != nil {
		t.Fatal(err)
	}
	l.m.DeleteEndpoint(old.Key)
	l.apply()
	l.expect("renamed", append(both(pass("a", "b", "tcp", 8080)), both(pass("b", "a", "tcp", 8080))...)...)
}
