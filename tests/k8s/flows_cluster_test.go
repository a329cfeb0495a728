package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/flowpagetest"
	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/testbin"
)

// flowsNS is the namespace of TestFlowsOnCluster's pods and policy.
const flowsNS = "flows-test"

// flowsPolicy allows the server's port 8080 and denies its 9090: the
// denied flow must name rule 1 of this policy.
const flowsPolicy = `apiVersion: projectcalico.org/v3
kind: NetworkPolicy
metadata: {name: web, namespace: ` + flowsNS + `}
spec:
  selector: app == 'server'
  types: [Ingress]
  ingress:
  - {action: Allow, protocol: TCP, destination: {ports: [8080]}}
  - {action: Deny, protocol: TCP, destination: {ports: [9090]}}
`

// TestFlowsOnCluster: flow records on a real two-node Kubernetes cluster
// (containerd and kubelet per node, routed installed from deploy/base by
// `kubectl apply -k`, as `make k8s-demo` does), with the deploy/flows
// component on top: the aggregator's Secrets and CA made by
// deploy/flows/secrets.sh, the aggregator Deployment and its ClusterIP
// Service, routed-node with the flows environment, sending to the
// aggregator through the Service with its routed-node etcd identity. A
// client pod on one node connects to a server pod on the other, on the
// port a NetworkPolicy allows and on the one it denies (real TCP). Through
// `kubectl port-forward` to the Service, `routedctl flows` shows both
// within 10 s of the connection, the denied one named by the policy's
// deny rule and recorded by the server's node, and the aggregator's
// page in headless Chromium shows the denied flow with that rule; the
// server node's JSON-lines file holds it too.
func TestFlowsOnCluster(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	testStart := time.Now()
	api, err := kubeapiserver.Build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kubeapiserver.BuildNode(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	routed := testbin.Path(t, "routed")
	ctl := testbin.Path(t, "routedctl")
	dir := t.TempDir()
	c, err := k8scluster.Up(ctx, k8scluster.Config{Dir: dir, Prefix: "rk8f", Subnet: netip.MustParsePrefix("10.254.0.0/24"), Nodes: 2,
		Routed: routed, KubeAPIServer: api, KubeNode: node, Logf: t.Logf})
	t.Cleanup(c.Down)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Dir(routed)
	overlay, err := demo.Install(ctx, c, repoRoot(), bin, t.Logf)
	if overlay != "" {
		t.Cleanup(func() { os.RemoveAll(overlay) })
	}
	if err != nil {
		failOnCluster(t, c, "install", err)
	}
	t.Logf("cluster up and routed installed in %s", time.Since(testStart).Round(time.Second))

	start := time.Now()
	fl := installFlows(ctx, t, c, overlay)
	t.Logf("flows component installed in %s", time.Since(start).Round(time.Second))
	routedctl := func(args ...string) string {
		t.Helper()
		out, err := demo.Routedctl(ctx, c, bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// The pods' namespace, its profile (the controllers write it), the
	// policy, then the pods: enforced from their start.
	kubectlOK(ctx, t, c, "create", "namespace", flowsNS)
	if err := k8scluster.WaitFor(ctx, 60*time.Second, "profile kns."+flowsNS, func() error {
		_, err := demo.Routedctl(ctx, c, bin, "get", "profile", "kns."+flowsNS)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	policyFile := filepath.Join(dir, "flows-policy.yaml")
	if err := os.WriteFile(policyFile, []byte(flowsPolicy), 0o644); err != nil {
		t.Fatal(err)
	}
	routedctl("apply", "-f", policyFile)
	client, server := c.Nodes[0].Name, c.Nodes[1].Name
	applyManifest(ctx, t, c, filepath.Join(dir, "flows-pods.yaml"), flowsPodsYAML(client, server))
	kubectlOK(ctx, t, c, "-n", flowsNS, "wait", "--for=condition=Ready", "pod/server", "pod/client", "--timeout=120s")
	serverIP := strings.TrimSpace(kubectlOK(ctx, t, c, "-n", flowsNS, "get", "pod", "server", "-o", "jsonpath={.status.podIP}"))
	connect := func(port int) (string, error) {
		return c.Kubectl(ctx, "-n", flowsNS, "exec", "client", "--", "/bin/busybox", "nc", "-w", "2", serverIP, fmt.Sprint(port))
	}

	pf := portForward(ctx, t, c, filepath.Join(dir, "port-forward.log"))
	base := []string{"--server", pf, "--ca-file", fl.ca, "--token-file", fl.token}
	flows := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, ctl, append(append([]string{"flows"}, base...), args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("routedctl flows %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	waitFlows := func(what string, limit time.Duration, args []string, want ...string) (string, time.Duration) {
		t.Helper()
		start := time.Now()
		for {
			out := flows(args...)
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(out, w)
			}
			if ok {
				return out, time.Since(start)
			}
			if time.Since(start) > limit {
				t.Fatalf("%s: routedctl flows %s lacks %q after %s:\n%s", what, strings.Join(args, " "), want, limit, out)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	out, _ := waitFlows("the aggregator, through kubectl port-forward to its Service", 30*time.Second, nil, "GAP: aggregator-started")
	t.Logf("routedctl flows through the port-forward:\n%s", out)

	// The allowed port, until it answers (the server's block route may
	// still be on its way to the client's node); both nodes' records of
	// it then show the senders are through to the aggregator, so what
	// follows times the flows, not a sender's first retry.
	if err := k8scluster.WaitFor(ctx, 60*time.Second, "client -> server:8080", func() error {
		out, err := connect(8080)
		if err == nil && !strings.Contains(out, "ok") {
			err = fmt.Errorf("answered %q, want ok", out)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFlows("the allowed flow from both nodes", 60*time.Second, []string{"-n", flowsNS, "--port", "8080"}, client+" ", server+" ")

	// Now the measured ones: a new allowed connection and a denied one.
	since := time.Now().UTC().Truncate(time.Second)
	allowedAt := time.Now()
	if out, err := connect(8080); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("client -> server:8080 (allowed by rule 0): %v %q", err, out)
	}
	deniedAt := time.Now()
	if out, err := connect(9090); err == nil {
		t.Fatalf("client -> server:9090 connected (%q): the policy's rule 1 denies it", out)
	}
	sinceArg := since.Format(time.RFC3339)
	denyRule := "ingress default/np:" + flowsNS + "/web[1] Deny"
	out, _ = waitFlows("the denied flow", 10*time.Second-time.Since(deniedAt), []string{"-n", flowsNS, "--verdict", "deny", "--since", sinceArg},
		server+" ", flowsNS+"/client", flowsNS+"/server", "TCP/9090", denyRule)
	deniedTook := time.Since(deniedAt)
	t.Logf("denied flow in routedctl flows %s after its first packet:\n%s", deniedTook.Round(time.Millisecond), out)
	out, _ = waitFlows("the allowed flow", 10*time.Second-time.Since(allowedAt), []string{"-n", flowsNS, "--port", "8080", "--since", sinceArg},
		"allow", "TCP/8080", "ingress default/np:"+flowsNS+"/web[0] Allow")
	t.Logf("allowed flow in routedctl flows %s after its first packet:\n%s", time.Since(allowedAt).Round(time.Millisecond), out)
	if strings.Contains(flows("-n", flowsNS, "--port", "9090", "--verdict", "allow", "--node", server), "TCP/9090") {
		t.Errorf("the server's node recorded the denied connection as allowed")
	}

	// The page, from the aggregator in the cluster, through the same
	// port-forward: the denied flow marked, filtered to it, its rule.
	page := flowpagetest.Open(t, pf, readToken(t, fl.token))
	page.Wait("the denied flow of "+flowsNS+" marked", `[...document.querySelectorAll("#flows tr.flow.denied")].some((r) => r.textContent.includes("`+flowsNS+`/server"))`)
	page.SetFilter("f-verdict", "deny")
	page.SetFilter("f-namespace", flowsNS)
	page.Wait("only denied flows of "+flowsNS+" after the filters", `(() => { const rows = document.querySelectorAll("#flows tr.flow");
		return rows.length >= 1 && [...rows].every((r) => r.classList.contains("denied") && r.textContent.includes("`+flowsNS+`/")) })()`)
	if rule := page.Text("#flows tr.denied td.rule"); !strings.Contains(rule, "ingress Deny np:"+flowsNS+"/web rule 1") {
		t.Errorf("the page's denied row names %q, want the NetworkPolicy's rule 1 (ingress Deny np:%s/web rule 1)", rule, flowsNS)
	}
	if path := os.Getenv("FLOWS_SCREENSHOT"); path != "" {
		page.Screenshot(path)
	}

	// The server node's JSON lines for log shippers hold the denied flow
	// with its rule.
	checkFlowsFile(t, c.Nodes[1].HostPath("/var/log/routed/flows.jsonl"), flowsNS)
	if deniedTook > 10*time.Second {
		t.Errorf("the denied flow took %s to show, want under 10 s", deniedTook)
	}
	t.Logf("TestFlowsOnCluster ran %s", time.Since(testStart).Round(time.Second))
}

// checkFlowsFile finds the denied flow to ns/server:9090 in a node's
// JSON-lines file, its ingress decided by rule 1 of policy web.
func checkFlowsFile(t *testing.T, path, ns string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the node's flows file: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var f flowrec.Flow
		if line == "" || json.Unmarshal([]byte(line), &f) != nil || f.DstPort != 9090 || f.Dst.Namespace != ns {
			continue
		}
		d := f.Ingress.Decider()
		if f.Verdict == "deny" && d.Policy == "np:"+ns+"/web" && d.Index == 1 && d.Action == "Deny" {
			t.Logf("%s: %s", path, line)
			return
		}
	}
	t.Errorf("%s has no denied flow to %s/server:9090 decided by np:%s/web rule 1:\n%s", path, ns, ns, tail(string(b), 20))
}

func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// flowsPodsYAML is a server pod on node server listening on 8080 and
// 9090 (each connection answered "ok"), and a client pod on node client.
func flowsPodsYAML(client, server string) string {
	pod := func(name, node, labels, cmd string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, labels: {%s}}
spec:
  nodeName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: busybox
    image: %s
    imagePullPolicy: Never
    command: ["/bin/busybox", "sh", "-c", %q]
`, name, flowsNS, labels, node, k8scluster.BusyboxImage, cmd)
	}
	serve := "for p in 8080 9090; do /bin/busybox nc -ll -p $p -e /bin/busybox echo ok & done; wait"
	return pod("server", server, "app: server", serve) + "---\n" + pod("client", client, "app: client", "exec /bin/busybox sleep 3600")
}
