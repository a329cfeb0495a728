package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// denyYAML denies a's traffic to b at b's ingress and allows everything
// else, as one GlobalNetworkPolicy selecting every pod.
func denyYAML(from, to string) string {
	return fmt.Sprintf(`apiVersion: routed.io/v1
kind: GlobalNetworkPolicy
metadata: {name: e2e-deny}
spec:
  selector: all()
  types: [Ingress]
  ingress:
  - action: Deny
    protocol: ICMP
    source: {nets: [%s/32]}
    destination: {nets: [%s/32]}
  - action: Allow
`, from, to)
}

// pings sends count pings and returns how many were answered.
func pings(t *testing.T, l *lab.Lab, from lab.Pod, to string, count int) int {
	t.Helper()
	got, err := l.Ping(context.Background(), from, to, count)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// waitVerdict probes until from->to gives the wanted verdict (answered or
// not), so a policy change is seen taking effect rather than assumed.
func waitVerdict(t *testing.T, l *lab.Lab, from lab.Pod, to string, answered bool, what string) time.Duration {
	t.Helper()
	start := time.Now()
	// No pause between probes: an unanswered one already waits its 1 s,
	// and the time the verdict took is reported.
	testenv.Eventually(t, 30*time.Second, 0, func() string {
		got, err := l.Ping(context.Background(), from, to, 1)
		if (got == 1) != answered {
			return fmt.Sprintf("%s: %s -> %s still answered=%v (%d of 1 answered, %v)", what, from.Name, to, !answered, got, err)
		}
		return ""
	})
	return time.Since(start)
}

// TestPolicyEnforcedAcrossNodes: pods reach each other through their
// namespace's profile; a GlobalNetworkPolicy that denies one flow stops
// exactly that flow on another node (a control flow from the same pod
// keeps working); the deny holds through kill -9 and restart of the
// destination node's routed while an allowed stream keeps flowing; and
// deleting the policy lets the flow through again.
func TestPolicyEnforcedAcrossNodes(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n := l.Topo.Nodes
	a := mustPod(t, l, n[0].Name, "pa")
	b := mustPod(t, l, n[2].Name, "pb")
	c := mustPod(t, l, n[2].Name, "pc")
	reach(t, l, a, b.IP)
	reach(t, l, a, c.IP)

	if err := l.ApplyYAML(ctx, "deny.yaml", denyYAML(a.IP, b.IP)); err != nil {
		t.Fatal(err)
	}
	took := waitVerdict(t, l, a, b.IP, false, "after the deny was applied")
	t.Logf("deny enforced %s after apply", took.Round(time.Millisecond))
	if got := pings(t, l, a, b.IP, 5); got != 0 {
		t.Fatalf("denied flow %s -> %s: %d of 5 answered", a.Name, b.Name, got)
	}
	if got := pings(t, l, a, c.IP, 5); got != 5 {
		t.Fatalf("allowed flow %s -> %s (same source, same node): %d of 5 answered", a.Name, c.Name, got)
	}
	if got := pings(t, l, c, b.IP, 5); got != 5 {
		t.Fatalf("allowed flow %s -> %s (other source, same destination): %d of 5 answered", c.Name, b.Name, got)
	}

	// kill -9 the destination node's routed, then start it again, while
	// probing both flows every 100 ms: each stream has finished probes
	// before the kill and three more after the node is ready again (a
	// restart from the feed cache can take less than one probe).
	den := l.StartPings(a, b.IP, 100*time.Millisecond)
	alw := l.StartPings(a, c.IP, 100*time.Millisecond)
	waitProbes := func(when string, n map[*lab.Pings]int) {
		t.Helper()
		for p, want := range n {
			if err := p.WaitDone(want, 30*time.Second); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
		}
	}
	waitProbes("before the kill", map[*lab.Pings]int{den: 1, alw: 2})
	l.StopNode(n[2].Name, true)
	if err := l.StartNode(ctx, n[2].Name); err != nil {
		t.Fatal(err)
	}
	if err := l.WaitNodeReady(ctx, n[2].Name, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitProbes("after the restart", map[*lab.Pings]int{den: den.Done() + 3, alw: alw.Done() + 3})
	d, al := den.Stop(), alw.Stop()
	t.Logf("across kill -9 and restart of routed on %s: denied flow %s, allowed flow %s", n[2].Name, d, al)
	if d.Sent == 0 || d.Received != 0 {
		t.Errorf("the denied flow passed %d packets across the restart: %s", d.Received, d)
	}
	if al.Sent == 0 || al.Lost() > al.Sent/20 {
		t.Errorf("the allowed flow lost too much across the restart: %s", al)
	}
	if got := pings(t, l, a, b.IP, 3); got != 0 {
		t.Fatalf("after the restart the denied flow is answered (%d of 3)", got)
	}

	if _, err := l.Ctl(ctx, "delete", "globalnetworkpolicy", "e2e-deny"); err != nil {
		t.Fatal(err)
	}
	took = waitVerdict(t, l, a, b.IP, true, "after the deny was deleted")
	t.Logf("flow allowed again %s after delete", took.Round(time.Millisecond))
}
