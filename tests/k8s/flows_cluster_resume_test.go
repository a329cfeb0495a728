package k8s_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
)

// flowsResume is TestFlowsOnCluster's second half, the issue's "routed
// killed -9, the aggregator restarted": routed on the server's node is
// killed -9 (kubelet starts it again) and the aggregator reports the
// node's restart as a gap (node-restarted); a denied connection after
// it shows within 10 s. Then the aggregator's pod is deleted: a new
// one starts with an empty window (gap aggregator-started), a denied
// connection made while it was away arrives (the nodes queue and
// resend), and one made after shows within 10 s. Nothing else restarts.
func flowsResume(ctx context.Context, t *testing.T, c *k8scluster.Cluster, r *flowsReader, pfLog string, connect func(int) (string, error)) {
	t.Helper()
	server := c.Nodes[1]
	deny := func(what string) time.Time {
		t.Helper()
		at := time.Now()
		if out, err := connect(9090); err == nil {
			t.Fatalf("%s: client -> server:9090 connected (%q)", what, out)
		}
		return at
	}

	pid := routedPID(t, server.Name)
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 routed (pid %d) on %s: %v", pid, server.Name, err)
	}
	t.Logf("routed (pid %d) on %s killed -9", pid, server.Name)
	if err := k8scluster.WaitFor(ctx, 120*time.Second, "routed on "+server.Name+" started again and Ready", func() error {
		restarts, ready := routedNodeStatus(ctx, c, server.Name)
		if restarts < 1 || !ready {
			return fmt.Errorf("restarts %d, ready %v", restarts, ready)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("routed on %s Ready again %s after the kill", server.Name, time.Since(killed).Round(time.Second))
	r.wait("the restart as a gap", 60*time.Second, nil, "GAP: node-restarted")
	since := sinceNow()
	at := deny("after the kill")
	out := r.wait("a denied flow after the restart", 10*time.Second-time.Since(at), []string{"-n", flowsNS, "--verdict", "deny", "--port", "9090", "--since", since},
		server.Name+" ", flowsDenyRule)
	t.Logf("after routed's kill -9 on %s, a denied flow in routedctl flows %s after its first packet:\n%s", server.Name, time.Since(at).Round(time.Millisecond), out)

	// The aggregator: its pod deleted, a new one started by its
	// Deployment; the old port-forward goes with the old pod.
	oldPod := strings.TrimSpace(kubectlOK(ctx, t, c, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=flows-aggregator", "-o", "jsonpath={.items[0].metadata.name}"))
	kubectlOK(ctx, t, c, "-n", "kube-system", "delete", "pod", oldPod, "--wait=true")
	since = sinceNow()
	deny("while the aggregator was away")
	kubectlOK(ctx, t, c, "-n", "kube-system", "rollout", "status", "deploy/routed-flows-aggregator", "--timeout=120s")
	r.url = portForward(ctx, t, c, pfLog)
	r.wait("the new aggregator's start as a gap", 30*time.Second, nil, "GAP: aggregator-started")
	r.wait("the denied flow of the aggregator's absence, resent", 60*time.Second, []string{"-n", flowsNS, "--verdict", "deny", "--port", "9090", "--since", since},
		server.Name+" ", flowsDenyRule)
	since = sinceNow()
	at = deny("after the aggregator's restart")
	out = r.wait("a denied flow after the aggregator's restart", 10*time.Second-time.Since(at), []string{"-n", flowsNS, "--verdict", "deny", "--port", "9090", "--since", since},
		server.Name+" ", flowsDenyRule)
	t.Logf("after the aggregator's restart, a denied flow in routedctl flows %s after its first packet:\n%s", time.Since(at).Round(time.Millisecond), out)

	// Nothing crashed: routed on the client's node never restarted,
	// the server node's once (the kill), the new aggregator never.
	if restarts, _ := routedNodeStatus(ctx, c, c.Nodes[0].Name); restarts != 0 {
		t.Errorf("routed on %s restarted %d times", c.Nodes[0].Name, restarts)
	}
	if restarts, _ := routedNodeStatus(ctx, c, server.Name); restarts != 1 {
		t.Errorf("routed on %s restarted %d times, want 1 (the kill)", server.Name, restarts)
	}
	if n := kubectlOK(ctx, t, c, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=flows-aggregator", "-o", "jsonpath={.items[*].status.containerStatuses[0].restartCount}"); strings.TrimSpace(n) != "0" {
		t.Errorf("the new aggregator's restarts: %q, want 0", n)
	}
}

// routedNodeStatus is the routed container's restart count and
// readiness in routed-node's pod on node.
func routedNodeStatus(ctx context.Context, c *k8scluster.Cluster, node string) (restarts int, ready bool) {
	out, err := c.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "--field-selector", "spec.nodeName="+node,
		"-o", `jsonpath={.items[0].status.containerStatuses[?(@.name=="routed")].restartCount} {.items[0].status.containerStatuses[?(@.name=="routed")].ready}`)
	if err != nil {
		return -1, false
	}
	n, r, _ := strings.Cut(strings.TrimSpace(out), " ")
	restarts, err = strconv.Atoi(n)
	if err != nil {
		return -1, false
	}
	return restarts, r == "true"
}

// routedPID finds routed-node's routed process on node: the one process
// in the node's network namespace run as /usr/local/bin/routed with no
// arguments (the DaemonSet's command; its probes run `routed health`).
func routedPID(t *testing.T, node string) int {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", node).Output()
	if err != nil {
		t.Fatalf("ip netns pids %s: %v", node, err)
	}
	var found []int
	for _, f := range strings.Fields(string(out)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && bytes.Equal(cmdline, []byte("/usr/local/bin/routed\x00")) {
			found = append(found, pid)
		}
	}
	if len(found) != 1 {
		t.Fatalf("routed-node's routed on %s: %d processes %v, want 1", node, len(found), found)
	}
	return found[0]
}
