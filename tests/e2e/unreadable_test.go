package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/tests/lab"
)

// TestUnreadablePolicyFailsClosed: a policy record in etcd that does not
// decode (written past routed's validation) is not skipped, which would
// let through what it may deny: felix denies the traffic it could
// decide, from its first snapshot and across a kill -9 and restart, and
// says so (routedctl policy unreadable, exit 3; a metric), and
// routedctl apply and delete repair it. A
// NetworkPolicy's deny is its namespace's: another namespace's pods
// still talk. A global kind's is every workload's. Fixed or deleted,
// traffic flows again.
func TestUnreadablePolicyFailsClosed(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n := l.Topo.Nodes
	pod := func(node, name, namespace string) lab.Pod {
		t.Helper()
		p, err := l.AddPodIn(ctx, node, name, namespace)
		if err != nil {
			t.Fatalf("add pod %s/%s on %s: %v", namespace, name, node, err)
		}
		return p
	}
	// Namespace other's profile, as routed's controllers keep one.
	if err := l.ApplyYAML(ctx, "kns-other.yaml", lab.NamespaceProfileYAML("other")); err != nil {
		t.Fatal(err)
	}
	a := pod(n[0].Name, "ua", "default")
	b := pod(n[2].Name, "ub", "default")
	o1 := pod(n[0].Name, "uo1", "other")
	o2 := pod(n[2].Name, "uo2", "other")
	reach(t, l, a, b.IP)
	reach(t, l, o1, o2.IP)

	npKey := datastore.Key(api.KindNetworkPolicy, "default.broken")
	if err := l.PutRaw(ctx, npKey, `{"kind":"NetworkPolicy","metadata":{"name":"broken","namespace":"default"},"spec":{"selector":7}}`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.DeleteRaw(context.Background(), npKey) })
	took := waitVerdict(t, l, a, b.IP, false, "after an unreadable NetworkPolicy in default")
	t.Logf("unreadable NetworkPolicy: default's traffic denied %s after the write", took.Round(time.Millisecond))
	if got := pings(t, l, b, a.IP, 3); got != 0 {
		t.Fatalf("default %s -> %s: %d of 3 answered; the namespace's traffic is denied both ways", b.Name, a.Name, got)
	}
	if got := pings(t, l, o1, b.IP, 3); got != 0 {
		t.Fatalf("other %s -> default %s: %d of 3 answered; default's ingress is denied", o1.Name, b.Name, got)
	}
	if got := pings(t, l, o1, o2.IP, 5); got != 5 {
		t.Fatalf("namespace other %s -> %s: %d of 5 answered; a NetworkPolicy's deny is its own namespace's", o1.Name, o2.Name, got)
	}
	waitUnreadable(t, l, n[2].Name, "NetworkPolicy", "default.broken", "namespace default")
	// get says so rather than list as if it did not exist.
	if out, err := l.Ctl(ctx, "get", "networkpolicy", "-n", "default"); err != nil ||
		!strings.Contains(out, "warning: NetworkPolicy default.broken (key "+npKey+") does not decode") {
		t.Errorf("get networkpolicy -n default does not warn of the unreadable record: %v\n%s", err, out)
	}
	if out, err := l.Ctl(ctx, "get", "networkpolicy", "broken", "-n", "default"); err == nil ||
		!strings.Contains(out, "does not decode") || !strings.Contains(out, "routedctl apply") {
		t.Errorf("get networkpolicy broken -n default: %v, want an error saying it does not decode and how to fix it\n%s", err, out)
	}
	// explain, from the datastore, models the same deny.
	if out, err := l.NodeCtl(ctx, n[2].Name, "policy", "explain", a.IP, b.IP, "icmp"); err != nil ||
		!strings.Contains(out, "unreadable:NetworkPolicy:default.broken") || !strings.Contains(out, "does not decode") {
		t.Errorf("policy explain %s %s does not name the unreadable record's deny: %v\n%s", a.IP, b.IP, err, out)
	}
	waitMetric(t, l, n[0].Name, "NetworkPolicy", 1)

	// kill -9 and restart b's node with the record still there: its
	// first snapshot has it, and no packet passes in between (felix
	// replaces the previous tables in one transaction). o1 -> b is
	// denied on b's node alone (o1's namespace is not denied).
	den := l.StartPings(o1, b.IP, 100*time.Millisecond)
	alw := l.StartPings(o1, o2.IP, 100*time.Millisecond)
	restartUnderPings(t, l, n[2].Name, den, alw)
	d, al := den.Stop(), alw.Stop()
	t.Logf("across kill -9 and restart of %s: other -> default %s, other -> other %s", n[2].Name, d, al)
	if d.Sent == 0 || d.Received != 0 {
		t.Errorf("the flow to default's pod passed %d packets across the restart: %s", d.Received, d)
	}
	if got := pings(t, l, o1, b.IP, 3); got != 0 {
		t.Fatalf("after the restart other %s -> default %s: %d of 3 answered", o1.Name, b.Name, got)
	}
	if al.Sent == 0 || al.Lost() > al.Sent/20 {
		t.Errorf("other's flow lost too much across the restart: %s", al)
	}
	waitUnreadable(t, l, n[2].Name, "NetworkPolicy", "default.broken", "namespace default")

	// Fixed as an operator would, with routedctl apply over the
	// record: traffic flows.
	if err := l.ApplyYAML(ctx, "fixed.yaml", `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: broken, namespace: default}
spec:
  selector: all()
  types: [Ingress, Egress]
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
`); err != nil {
		t.Fatal(err)
	}
	took = waitVerdict(t, l, a, b.IP, true, "after the NetworkPolicy was fixed")
	t.Logf("fixed: default's traffic flows %s after the write", took.Round(time.Millisecond))
	waitNoUnreadable(t, l, n[2].Name)
	if err := l.DeleteRaw(ctx, npKey); err != nil {
		t.Fatal(err)
	}

	// A global kind: every workload's traffic.
	gnsKey := datastore.Key(api.KindGlobalNetworkSet, "broken-set")
	if err := l.PutRaw(ctx, gnsKey, "{not json"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.DeleteRaw(context.Background(), gnsKey) })
	waitVerdict(t, l, o1, o2.IP, false, "after an unreadable GlobalNetworkSet")
	if got := pings(t, l, a, b.IP, 3); got != 0 {
		t.Fatalf("default %s -> %s: %d of 3 answered with an unreadable GlobalNetworkSet", a.Name, b.Name, got)
	}
	waitUnreadable(t, l, n[0].Name, "GlobalNetworkSet", "broken-set", "all workload and host endpoints")
	if out, err := l.Ctl(ctx, "delete", "globalnetworkset", "broken-set"); err != nil {
		t.Fatalf("routedctl delete of the unreadable GlobalNetworkSet: %v: %s", err, out)
	}
	waitVerdict(t, l, o1, o2.IP, true, "after the GlobalNetworkSet was deleted")
	waitVerdict(t, l, a, b.IP, true, "after the GlobalNetworkSet was deleted")
	waitNoUnreadable(t, l, n[0].Name)

	c := unreadableHostEndpoint(t, l, a, b, o1, o2)
	unreadableWorkloadEndpoint(t, l, a, b, c, o1, o2)
}

// unreadableHostEndpoint: a HostEndpoint record of b's node that does
// not decode (its expectedIPs is not a list) but names the node's
// uplink eth0 stands for a host endpoint there that denies everything
// (it applies on forward, so the pods' traffic through eth0 too), on
// that node alone; BGP (a failsafe port) keeps the routes meanwhile,
// and a kill -9 and restart of the node does not open it. Deleted with
// routedctl, traffic flows again. a and o1 share a node that the
// record does not name.
func unreadableHostEndpoint(t *testing.T, l *lab.Lab, a, b, o1, o2 lab.Pod) (c lab.Pod) {
	ctx := context.Background()
	if a.Node != o1.Node || b.Node != o2.Node || a.Node == b.Node {
		t.Fatalf("pods on %s, %s, %s, %s: want a and o1 on one node, b and o2 on another", a.Node, o1.Node, b.Node, o2.Node)
	}
	// c is on a third node: a -> c crosses two nodes' eth0 the record
	// does not name.
	for _, n := range l.Topo.Nodes {
		if n.Name != a.Node && n.Name != b.Node {
			p, err := l.AddPodIn(ctx, n.Name, "uc", "default")
			if err != nil {
				t.Fatalf("add pod default/uc on %s: %v", n.Name, err)
			}
			c = p
			break
		}
	}
	if c.Name == "" {
		t.Fatal("the lab has no third node")
	}
	reach(t, l, a, o1.IP)
	reach(t, l, a, c.IP)
	hepKey := datastore.Key(api.KindHostEndpoint, "broken-hep")
	raw := fmt.Sprintf(`{"kind":"HostEndpoint","metadata":{"name":"broken-hep"},"spec":{"node":%q,"interfaceName":"eth0","expectedIPs":7}}`, b.Node)
	if err := l.PutRaw(ctx, hepKey, raw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.DeleteRaw(context.Background(), hepKey) })
	took := waitVerdict(t, l, a, b.IP, false, "after an unreadable HostEndpoint on "+b.Node+"'s eth0")
	t.Logf("unreadable HostEndpoint: traffic through %s's eth0 denied %s after the write", b.Node, took.Round(time.Millisecond))
	if got := pings(t, l, o1, o2.IP, 3); got != 0 {
		t.Fatalf("%s -> %s: %d of 3 answered through %s's eth0, which the unreadable HostEndpoint names", o1.Name, o2.Name, got, b.Node)
	}
	if got := pings(t, l, a, o1.IP, 5); got != 5 {
		t.Fatalf("%s -> %s on %s: %d of 5 answered; the record names %s alone", a.Name, o1.Name, a.Node, got, b.Node)
	}
	if got := pings(t, l, a, c.IP, 5); got != 5 {
		t.Fatalf("%s -> %s (%s -> %s): %d of 5 answered; the record names %s's eth0 alone", a.Name, c.Name, a.Node, c.Node, got, b.Node)
	}
	waitUnreadable(t, l, b.Node, "HostEndpoint", "broken-hep", "this node's host traffic on eth0")
	waitUnreadable(t, l, a.Node, "HostEndpoint", "broken-hep", "nothing on this node")
	waitMetric(t, l, b.Node, "HostEndpoint", 1)

	// kill -9 and restart b's node: its first snapshot has the record.
	den := l.StartPings(a, b.IP, 100*time.Millisecond)
	restartUnderPings(t, l, b.Node, den)
	d := den.Stop()
	t.Logf("across kill -9 and restart of %s: %s -> %s %s", b.Node, a.Name, b.Name, d)
	if d.Sent == 0 || d.Received != 0 {
		t.Errorf("the flow through %s's eth0 passed %d packets across its restart: %s", b.Node, d.Received, d)
	}
	// Its first policy apply may come after BGP (WaitNodeReady): the
	// node's felix lists the record, then packets are checked again.
	waitUnreadable(t, l, b.Node, "HostEndpoint", "broken-hep", "this node's host traffic on eth0")
	if got := pings(t, l, a, b.IP, 3); got != 0 {
		t.Fatalf("after the restart %s -> %s: %d of 3 answered through %s's eth0", a.Name, b.Name, got, b.Node)
	}
	if got := pings(t, l, o1, o2.IP, 3); got != 0 {
		t.Fatalf("after the restart %s -> %s: %d of 3 answered through %s's eth0", o1.Name, o2.Name, got, b.Node)
	}

	if out, err := l.Ctl(ctx, "delete", "hostendpoint", "broken-hep"); err != nil {
		t.Fatalf("routedctl delete of the unreadable HostEndpoint: %v: %s", err, out)
	}
	took = waitVerdict(t, l, a, b.IP, true, "after the HostEndpoint was deleted")
	t.Logf("deleted: traffic through %s's eth0 flows %s after the delete", b.Node, took.Round(time.Millisecond))
	waitVerdict(t, l, o1, o2.IP, true, "after the HostEndpoint was deleted")
	waitNoUnreadable(t, l, b.Node)
	return c
}

// restartUnderPings kills node's routed (-9) and starts it again while
// the ping flows run: it waits until each flow has a result (the
// second and later flows two: they started after the first), the node
// is ready again, and each flow has three more results.
func restartUnderPings(t *testing.T, l *lab.Lab, node string, flows ...*lab.Pings) {
	t.Helper()
	ctx := context.Background()
	for i, f := range flows {
		if err := f.WaitDone(min(i+1, 2), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	l.StopNode(node, true)
	if err := l.StartNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitNodeReady(ctx, node, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		if err := f.WaitDone(f.Done()+3, 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
}

// waitUnreadable waits until routedctl policy unreadable on node lists
// the record with its scope, exiting 3.
func waitUnreadable(t *testing.T, l *lab.Lab, node, kind, name, scope string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
		out, err := l.NodeCtl(context.Background(), node, "policy", "unreadable")
		if err == nil || !strings.Contains(err.Error(), "exit status 3") {
			return fmt.Sprintf("routedctl policy unreadable on %s: %v, want exit status 3; output %q", node, err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == kind && f[1] == name && strings.Contains(line, scope) {
				return ""
			}
		}
		return fmt.Sprintf("routedctl policy unreadable on %s does not list %s %s (%s): %q", node, kind, name, scope, out)
	})
}

// waitNoUnreadable waits until node lists no unreadable record.
func waitNoUnreadable(t *testing.T, l *lab.Lab, node string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
		out, err := l.NodeCtl(context.Background(), node, "policy", "unreadable")
		if err != nil || !strings.Contains(out, "No unreadable policy records.") {
			return fmt.Sprintf("routedctl policy unreadable on %s: %v %q", node, err, out)
		}
		return ""
	})
}

// waitMetric waits until node's routed_policy_unreadable_records for
// kind is want.
func waitMetric(t *testing.T, l *lab.Lab, node, kind string, want float64) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() string {
		m, err := l.NodeMetricFamilies(context.Background(), node)
		if err != nil {
			return err.Error()
		}
		got, found := m.Sum("routed_policy_unreadable_records", map[string]string{"kind": kind})
		if !found || got != want {
			return fmt.Sprintf("metrics of %s: routed_policy_unreadable_records{kind=%q} = %v (found %v), want %v", node, kind, got, found, want)
		}
		return ""
	})
}
