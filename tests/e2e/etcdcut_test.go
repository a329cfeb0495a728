package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/tests/lab"
)

// cutFor is how long the node stays cut off from etcd (the 120 s:
// longer than the datastore watch's liveness limit of 100 s, so a node
// that let liveness fail during an outage would be caught).
const cutFor = 120 * time.Second

// nodeCutOff cuts dst's node off from every etcd member while the rest
// of the cluster keeps etcd: its pods keep forwarding and its BGP sessions
// hold, readiness says why, an ADD on it fails within its budget naming
// etcd, and a policy written and compacted away meanwhile is enforced
// after the heal, by the same routed process (no restart).
func nodeCutOff(t *testing.T, l *lab.Lab, src, dst lab.Pod) {
	ctx := context.Background()
	cut := dst.Node
	victim := mustPod(t, l, cut, "cv")
	reach(t, l, src, victim.IP)
	before := readFeedCounts(t, l)
	startTime := processStart(t, l, cut)
	sessions := nodeSessions(t, l, cut)

	pctx, pcancel := context.WithCancel(ctx)
	pings := make(chan lab.PingResult, 1)
	go func() { pings <- l.PingStream(pctx, src, dst.IP, 100*time.Millisecond) }()
	if err := l.CutNodeFromEtcd(ctx, cut); err != nil {
		t.Fatal(err)
	}
	cutAt := time.Now()
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := l.RestoreNodeEtcd(ctx, cut); err != nil {
				t.Error(err)
			}
		}
	}
	defer restore()

	// Readiness says why.
	var code int
	var body string
	testenv.Eventually(t, 60*time.Second, 500*time.Millisecond, func() string {
		var err error
		code, body, err = l.NodeProbe(ctx, cut, "/readiness")
		if err != nil || code == http.StatusOK || !strings.Contains(body, "etcd") {
			return fmt.Sprintf("readiness of %s cut off from etcd for %v: %d %q (%v); want not ready, naming etcd", cut, time.Since(cutAt).Round(time.Second), code, body, err)
		}
		return ""
	})
	t.Logf("%s not ready %v after the cut: %d %s", cut, time.Since(cutAt).Round(time.Second), code, strings.TrimSpace(body))

	// An ADD on the cut node fails within its budget, naming etcd.
	addStart := time.Now()
	_, addErr := l.AddPod(ctx, cut, "cut-add")
	addTook := time.Since(addStart)
	t.Logf("CNI ADD on %s while cut off failed after %v: %v", cut, addTook.Round(time.Millisecond), addErr)
	if addErr == nil || !strings.Contains(addErr.Error(), "etcd") {
		t.Errorf("CNI ADD on a node cut off from etcd: want an error naming etcd, got %v", addErr)
	}
	if addTook > 30*time.Second {
		t.Errorf("CNI ADD on a node cut off from etcd took %v to fail", addTook)
	}

	// The rest of the cluster writes a deny for a flow into the cut node,
	// then etcd compacts its history past what the cut node has seen.
	// etcd keeps the compaction's own revision (a watch from it is
	// served), so compacting right after the deny would leave a node
	// that missed only the deny free to resume, and rightly: a second
	// write puts the deny's revision below the compaction.
	if err := l.ApplyYAML(ctx, "cut-deny.yaml", denyYAML(src.IP, victim.IP)); err != nil {
		t.Fatal(err)
	}
	if err := l.ApplyYAML(ctx, "cut-mark.yaml", cutMarkYAML); err != nil {
		t.Fatal(err)
	}
	rev, err := l.CompactEtcd(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("etcd compacted to revision %d while %s was cut off", rev, cut)

	if rest := cutFor - time.Since(cutAt); rest > 0 {
		time.Sleep(rest) // not a poll: the outage itself, which must outlast the watch's liveness limit
	}
	// Still not ready (it never got etcd back), and still running.
	if code, body, err := l.NodeProbe(ctx, cut, "/readiness"); err != nil || code == http.StatusOK {
		t.Errorf("readiness after %v cut off: %d %q (%v)", time.Since(cutAt).Round(time.Second), code, body, err)
	}
	if code, body, err := l.NodeProbe(ctx, cut, "/liveness"); err != nil || code != http.StatusOK {
		t.Errorf("liveness after %v cut off from etcd: %d %q (%v); an etcd outage must not get routed restarted", time.Since(cutAt).Round(time.Second), code, body, err)
	}
	if got := nodeSessions(t, l, cut); got != sessions {
		t.Errorf("BGP sessions of %s changed while it was cut off from etcd:\\nbefore:\\n%s\\nafter:\\n%s", cut, sessions, got)
	}
	restore()
	healedAt := time.Now()
	if err := l.WaitNodeReady(ctx, cut, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitVerdict(t, l, src, victim.IP, false, "the deny written while the node was cut off")
	t.Logf("after the heal: the deny enforced on %s %v later", cut, time.Since(healedAt).Round(time.Millisecond))
	pcancel()
	ping := <-pings
	t.Logf("pod traffic into the cut node over %v: %s", time.Since(cutAt).Round(time.Second), ping)
	if ping.Lost() > 0 || ping.Sent < 100 {
		t.Errorf("pings into a node cut off from etcd: %s; want none lost", ping)
	}
	if got := processStart(t, l, cut); got != startTime {
		t.Errorf("routed on %s restarted (process start %v, was %v)", cut, got, startTime)
	}
	// It converged: a new pod on it, addresses consistent, and the feed
	// listed again once, saying why (the compaction), while the others
	// only resumed.
	reach(t, l, src, mustPod(t, l, cut, "cut-after").IP)
	ipamClean(t, l, "after the cut")
	report, _ := feedDelta(before, readFeedCounts(t, l))
	t.Logf("node feeds across the cut: %s", report)
	after := readFeedCounts(t, l)
	for _, nd := range l.Topo.Nodes {
		b, a := before[nd.Name], after[nd.Name]
		compacted := a.lists["compacted"] - b.lists["compacted"]
		if nd.Name == cut && compacted < 1 {
			t.Errorf("%s's feed did not list again after its revision was compacted: %s", cut, report)
		}
		if nd.Name != cut && compacted > 0 {
			t.Errorf("%s's feed (never cut off) listed again: %s", nd.Name, report)
		}
	}
	if _, err := l.Ctl(ctx, "delete", "globalnetworkpolicy", "e2e-deny"); err != nil {
		t.Error(err)
	}
	if _, err := l.Ctl(ctx, "delete", "globalnetworkset", "e2e-cut-mark"); err != nil {
		t.Error(err)
	}
	waitVerdict(t, l, src, victim.IP, true, "after the deny was deleted")
}

// cutMarkYAML is a write after the deny, so that compacting at etcd's
// revision compacts the deny's revision away: a network set no policy
// selects (TEST-NET-1), which changes no verdict.
const cutMarkYAML = `apiVersion: routed.io/v1
kind: GlobalNetworkSet
metadata: {name: e2e-cut-mark, labels: {e2e-cut-mark: "1"}}
spec:
  nets: [192.0.2.0/24]
`

// processStart is routed's process start time on node, from its metrics.
func processStart(t *testing.T, l *lab.Lab, node string) float64 {
	t.Helper()
	m, err := l.NodeMetricFamilies(context.Background(), node)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := m.Sum("process_start_time_seconds", nil)
	if !ok {
		t.Fatalf("%s's metrics have no process_start_time_seconds", node)
	}
	return v
}

// nodeSessions is `routedctl node status` on node: every session with
// the time it last changed state.
func nodeSessions(t *testing.T, l *lab.Lab, node string) string {
	t.Helper()
	out, err := l.NodeCtl(context.Background(), node, "node", "status")
	if err != nil {
		t.Fatalf("node status on %s: %v\n%s", node, err, out)
	}
	return out
}
