package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/tests/lab"
)

// unreadableWorkloadEndpoint: a WorkloadEndpoint record that does not
// decode (its ports are not a list), of pod o2 in namespace other, which
// a policy keeps from default's pods by its namespace's label, is not
// left in force as it was (its previous version would keep its old
// labels and rules) nor skipped (its address would be no endpoint's, out
// of reach of any Deny by label): its node drops the pod's traffic both
// ways, every node denies the traffic from and to the address salvaged
// from the record and lists it (routedctl policy unreadable, the
// metric), explain names the deny, a kill -9 and restart of its node
// passes no packet, and the other pods still talk. Written back whole,
// the pod talks again and the policy's Deny by label picks it again.
// a and o1 share a node, b and o2 another, c is on a third.
func unreadableWorkloadEndpoint(t *testing.T, l *lab.Lab, a, b, c, o1, o2 lab.Pod) {
	ctx := context.Background()
	if err := l.ApplyYAML(ctx, "no-other.yaml", `apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: no-other}
spec:
  order: 10
  selector: projectcalico.org/namespace == 'default'
  types: [Ingress]
  ingress:
  - {action: Deny, source: {selector: "projectcalico.org/namespace == 'other'"}}
  - {action: Allow}
`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = l.Ctl(context.Background(), "delete", "globalnetworkpolicy", "no-other") })
	waitVerdict(t, l, o2, a.IP, false, "other's pod to default's with the policy denying namespace other")
	reach(t, l, o2, o1.IP)
	if got := pings(t, l, c, a.IP, 5); got != 5 {
		t.Fatalf("default %s -> %s: %d of 5 answered; the policy denies namespace other alone", c.Name, a.Name, got)
	}

	key, good := endpointRecord(t, l, o2)
	name := strings.TrimPrefix(key, datastore.KindPrefix(api.KindWorkloadEndpoint))
	var rec map[string]any
	if err := json.Unmarshal([]byte(good), &rec); err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	spec, _ := rec["spec"].(map[string]any)
	if spec == nil {
		t.Fatalf("%s has no spec: %s", key, good)
	}
	spec["ports"] = 7 // not a list: the record does not decode
	bad, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.PutRaw(ctx, key, string(bad)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.PutRaw(context.Background(), key, good) })
	took := waitVerdict(t, l, o2, o1.IP, false, "after "+o2.Name+"'s WorkloadEndpoint record stopped decoding")
	t.Logf("unreadable WorkloadEndpoint: %s's traffic denied %s after the write", o2.Name, took.Round(time.Millisecond))
	if got := pings(t, l, o1, o2.IP, 3); got != 0 {
		t.Fatalf("%s -> %s: %d of 3 answered with %s's record unreadable", o1.Name, o2.Name, got, o2.Name)
	}
	if got := pings(t, l, c, a.IP, 5); got != 5 {
		t.Fatalf("%s -> %s: %d of 5 answered; the deny is of %s's address alone", c.Name, a.Name, got, o2.IP)
	}
	scope := "traffic from and to " + o2.IP + "/32"
	for _, n := range l.Topo.Nodes {
		waitUnreadable(t, l, n.Name, "WorkloadEndpoint", name, scope)
	}
	waitMetric(t, l, a.Node, "WorkloadEndpoint", 1)
	if out, err := l.NodeCtl(ctx, a.Node, "policy", "explain", o2.IP, a.IP, "icmp"); err != nil ||
		!strings.Contains(out, "unreadable:WorkloadEndpoint:"+name) {
		t.Errorf("policy explain %s %s does not name the unreadable endpoint's deny: %v\n%s", o2.IP, a.IP, err, out)
	}

	// kill -9 and restart o2's node: its first snapshot has the record.
	den := l.StartPings(o2, o1.IP, 100*time.Millisecond)
	alw := l.StartPings(b, a.IP, 100*time.Millisecond)
	restartUnderPings(t, l, o2.Node, den, alw)
	d, al := den.Stop(), alw.Stop()
	t.Logf("across kill -9 and restart of %s: %s -> %s %s; %s -> %s %s", o2.Node, o2.Name, o1.Name, d, b.Name, a.Name, al)
	if d.Sent == 0 || d.Received != 0 {
		t.Errorf("%s's traffic passed %d packets across its node's restart: %s", o2.Name, d.Received, d)
	}
	if al.Sent == 0 || al.Lost() > al.Sent/20 {
		t.Errorf("%s's flow on the same node lost too much across the restart: %s", b.Name, al)
	}
	waitUnreadable(t, l, o2.Node, "WorkloadEndpoint", name, scope)
	if got := pings(t, l, o2, o1.IP, 3); got != 0 {
		t.Fatalf("after the restart %s -> %s: %d of 3 answered", o2.Name, o1.Name, got)
	}

	// Written back whole: the pod talks again, and the policy picks it
	// by its namespace again.
	if err := l.PutRaw(ctx, key, good); err != nil {
		t.Fatal(err)
	}
	took = waitVerdict(t, l, o2, o1.IP, true, "after "+o2.Name+"'s record was written back")
	t.Logf("written back: %s's traffic flows %s after the write", o2.Name, took.Round(time.Millisecond))
	for _, n := range l.Topo.Nodes {
		waitNoUnreadable(t, l, n.Name)
	}
	if got := pings(t, l, o2, a.IP, 3); got != 0 {
		t.Fatalf("%s -> %s: %d of 3 answered; the policy denies namespace other", o2.Name, a.Name, got)
	}
}

// endpointRecord returns the key and stored value of pod p's
// WorkloadEndpoint record.
func endpointRecord(t *testing.T, l *lab.Lab, p lab.Pod) (key, value string) {
	t.Helper()
	all, err := l.GetRawPrefix(context.Background(), datastore.KindPrefix(api.KindWorkloadEndpoint))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range all {
		var w api.WorkloadEndpoint
		if json.Unmarshal([]byte(v), &w) == nil && w.Spec.Pod == p.Name && w.Spec.Node == p.Node {
			if key != "" {
				t.Fatalf("two WorkloadEndpoint records for pod %s on %s: %s and %s", p.Name, p.Node, key, k)
			}
			key, value = k, v
		}
	}
	if key == "" {
		t.Fatalf("no WorkloadEndpoint record for pod %s on %s among %d", p.Name, p.Node, len(all))
	}
	return key, value
}
