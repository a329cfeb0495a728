package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/ctl"
	"github.com/routed-net/routed/routed/status"
)

// visYAML logs ICMP to b, denies a's ICMP to c and allows the rest, at
// every pod's ingress.
func visYAML(a, b, c string) string {
	return fmt.Sprintf(`apiVersion: routed.io/v1
kind: GlobalNetworkPolicy
metadata: {name: e2e-vis}
spec:
  selector: all()
  types: [Ingress]
  ingress:
  - action: Log
    protocol: ICMP
    destination: {nets: [%s/32]}
  - action: Deny
    protocol: ICMP
    source: {nets: [%s/32]}
    destination: {nets: [%s/32]}
  - action: Allow
`, b, a, c)
}

// TestPolicyLogAndExplain runs what an operator would: a Log rule's
// packets show in "routedctl policy log" on the destination's node (and
// in its -f follow mode as they come) with the pods' addresses, the
// endpoint, tier, policy, rule and verdict; "routedctl policy explain"
// names the rule that allows one flow and the one that denies another,
// agrees with real pings, and finds the kernel counter of that rule on
// the destination's node has counted them.
func TestPolicyLogAndExplain(t *testing.T) {
	l := startLab(t)
	ctx := context.Background()
	n := l.Topo.Nodes
	a := mustPod(t, l, n[0].Name, "va")
	b := mustPod(t, l, n[2].Name, "vb")
	c := mustPod(t, l, n[2].Name, "vc")
	reach(t, l, a, b.IP)
	if err := l.ApplyYAML(ctx, "vis.yaml", visYAML(a.IP, b.IP, c.IP)); err != nil {
		t.Fatal(err)
	}
	waitVerdict(t, l, a, c.IP, false, "after the deny was applied")

	// Follow the destination node's log from before the pings.
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	follow := exec.CommandContext(fctx, l.Bins.Routedctl, "policy", "log", "-f", "-o", "json",
		"--status-socket", filepath.Join(l.Dir, n[2].Name, "routed.sock"))
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(); _ = follow.Wait() })
	followed := make(chan status.PolicyLogRecord, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var r status.PolicyLogRecord
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				followed <- r
			}
		}
	}()

	// Policy sees the first packet of each flow only (the rest are
	// established): three ping processes, three flows, three records.
	for range 3 {
		if got := pings(t, l, a, b.IP, 1); got != 1 {
			t.Fatalf("allowed, logged flow: %d of 1 answered", got)
		}
	}
	wantRecord := func(r status.PolicyLogRecord) bool {
		return r.Verdict == "log" && r.Src == a.IP && r.Dst == b.IP && r.Proto == "ICMP"
	}
	checkRecord := func(how string, r status.PolicyLogRecord) {
		t.Helper()
		if r.Direction != "ingress" || r.Tier != "default" || r.Policy != "gnp:e2e-vis" || r.Rule != 0 || r.Action != "Log" ||
			r.Kind != "policy rule" || r.ICMPType == nil || *r.ICMPType != 8 || r.Endpoint == "" || !strings.HasPrefix(r.Iface, "cali") {
			t.Errorf("%s: record %+v", how, r)
		}
	}
	select {
	case r := <-followed:
		for !wantRecord(r) {
			r = <-followed
		}
		checkRecord("policy log -f", r)
	case <-time.After(10 * time.Second):
		t.Fatal("policy log -f printed no record of the logged pings within 10 s")
	}
	var got []status.PolicyLogRecord
	testenv.Eventually(t, 10*time.Second, 200*time.Millisecond, func() string {
		out, err := l.NodeCtl(ctx, n[2].Name, "policy", "log", "-o", "json")
		if err != nil {
			return fmt.Sprintf("policy log: %v: %s", err, out)
		}
		got = nil
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var r status.PolicyLogRecord
			if json.Unmarshal([]byte(line), &r) == nil && wantRecord(r) {
				got = append(got, r)
			}
		}
		if len(got) < 3 {
			return fmt.Sprintf("%d of 3 logged pings in policy log: %s", len(got), out)
		}
		return ""
	})
	checkRecord("policy log", got[0])
	if out, err := l.NodeCtl(ctx, n[2].Name, "policy", "log", "--tail", "1"); err != nil || !strings.Contains(out, "policy gnp:e2e-vis rule 0 (Log)") {
		t.Errorf("policy log --tail 1: %v\n%s", err, out)
	}

	// Explain, checked against the counters of the destinations' node.
	explain := func(src, dst string) ctl.ExplainResult {
		t.Helper()
		out, err := l.NodeCtl(ctx, n[2].Name, "policy", "explain", src, dst, "icmp", "-o", "json")
		if err != nil {
			t.Fatalf("policy explain %s %s: %v\n%s", src, dst, err, out)
		}
		var r ctl.ExplainResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("policy explain output: %v\n%s", err, out)
		}
		return r
	}
	if got := pings(t, l, a, c.IP, 2); got != 0 {
		t.Fatalf("denied flow: %d of 2 answered", got)
	}
	out, err := l.NodeCtl(ctx, n[2].Name, "policy", "counters", "e2e-vis")
	if err != nil || !strings.Contains(out, "pi-gnp:e2e-vis/1") || strings.Contains(out, "before watch") {
		t.Errorf("policy counters e2e-vis: %v\n%s", err, out)
	}
	t.Logf("policy counters on %s:\n%s", n[2].Name, out)
	refA := "default/va"
	allowed := explain(refA, b.IP)
	denied := explain(refA, "default/vc")
	t.Logf("explain %s -> %s: %+v", a.Name, b.Name, allowed)
	if !allowed.Allowed || allowed.Ingress.Rule.ID != "pi-gnp:e2e-vis/2" || len(allowed.Ingress.Logged) != 1 || allowed.Egress.Node != n[0].Name {
		t.Errorf("a -> b: %+v", allowed)
	}
	if denied.Allowed || denied.Ingress.Rule.ID != "pi-gnp:e2e-vis/1" || denied.Ingress.Rule.Action != "Deny" || denied.Ingress.Node != n[2].Name {
		t.Errorf("a -> c: %+v", denied)
	}
	for _, r := range []ctl.ExplainResult{allowed, denied} {
		if len(r.Kernel) != 1 || r.Kernel[0].Direction != "ingress" || !r.Kernel[0].Agrees || r.Kernel[0].Packets == 0 || r.Kernel[0].LastHit == nil {
			t.Errorf("%s -> %s: the kernel check %+v (%s), want the ingress rule's counter on %s with packets", r.Src, r.Dst, r.Kernel, r.Counters, n[2].Name)
		}
	}
	if out, err := l.NodeCtl(ctx, n[2].Name, "policy", "explain", refA, "default/vc", "icmp"); err != nil ||
		!strings.Contains(out, "policy gnp:e2e-vis, ingress rule 1 (Deny)") || !strings.Contains(out, "verdict: denied") || !strings.Contains(out, "agrees") {
		t.Errorf("policy explain (text): %v\n%s", err, out)
	}
}
