package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/felix/policy/flowrec"
	"github.com/routed-net/routed/internal/flowpagetest"
	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/testbin"
)

// flowsNS is the namespace of TestFlowsOnCluster's pods and policy.
const flowsNS = "flows-test"

// flowsPolicy: the NetworkPolicy web allows the server's port 8080 and
// denies its 9090 (rule 1); before it, tier security's
// GlobalNetworkPolicy guard denies 7070 and passes the rest to the
// default tier; the staged GlobalNetworkPolicy lockdown would deny 8080.
const flowsPolicy = `apiVersion: projectcalico.org/v3
kind: Tier
metadata: {name: security}
spec: {order: 100}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: security.guard}
spec:
  tier: security
  selector: app == 'server'
  types: [Ingress]
  ingress:
  - {action: Deny, protocol: TCP, destination: {ports: [7070]}}
  - {action: Pass}
---
apiVersion: projectcalico.org/v3
kind: StagedGlobalNetworkPolicy
metadata: {name: lockdown}
spec: {order: 1, selector: app == 'server', types: [Ingress], ingress: [{action: Deny, protocol: TCP, destination: {ports: [8080]}}]}
---
apiVersion: projectcalico.org/v3
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
// port a NetworkPolicy allows, on the one it denies and on one a
// GlobalNetworkPolicy of tier security denies (real TCP). Through
// `kubectl port-forward` to the Service, `routedctl flows` shows each
// within 10 s of the connection: the denied ones named by their deny
// rules and recorded by the server's node, the allowed one with tier
// security's Pass in its trace and the staged policy's deny; the
// aggregator's page in headless Chromium shows the denied flow with its
// rule; the server node's JSON-lines file holds it too. Then routed is
// killed -9 on the server's node and the aggregator's pod deleted
// (flowsResume): records resume, both are reported as gaps.
func TestFlowsOnCluster(t *testing.T) {
	skipShort(t)
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	testStart := time.Now()
	api, node := kubeBinaries(ctx, t)
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

	r := &flowsReader{ctx: ctx, t: t, ctl: ctl, ca: fl.ca, token: fl.token}
	r.url = portForward(ctx, t, c, filepath.Join(dir, "port-forward.log"))
	flows, waitFlows := r.flows, r.wait
	out := waitFlows("the aggregator, through kubectl port-forward to its Service", 30*time.Second, nil, "GAP: aggregator-started")
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

	// Now the measured ones, each timed from its own connection: a new
	// allowed connection, then the two denied.
	since := sinceNow()
	allowedAt := time.Now()
	if out, err := connect(8080); err != nil || !strings.Contains(out, "ok") {
		t.Fatalf("client -> server:8080 (allowed by rule 0): %v %q", err, out)
	}
	out = waitFlows("the allowed flow, passed by tier security, staged to be denied", 10*time.Second-time.Since(allowedAt),
		[]string{"-n", flowsNS, "--port", "8080", "--node", server, "--since", since, "-o", "wide"},
		"allow", "TCP/8080", "ingress default/np:"+flowsNS+"/web[0] Allow", "ingress: ingress security/gnp:security.guard[1] Pass", "sgnp:lockdown=deny")
	t.Logf("allowed flow in routedctl flows %s after its first packet:\n%s", time.Since(allowedAt).Round(time.Millisecond), out)
	since = sinceNow()
	deniedAt := time.Now()
	if out, err := connect(9090); err == nil {
		t.Fatalf("client -> server:9090 connected (%q): the policy's rule 1 denies it", out)
	}
	out = waitFlows("the NetworkPolicy's deny", 10*time.Second-time.Since(deniedAt), []string{"-n", flowsNS, "--verdict", "deny", "--port", "9090", "--since", since},
		server+" ", flowsNS+"/client", flowsNS+"/server", "TCP/9090", flowsDenyRule)
	t.Logf("the NetworkPolicy's deny in routedctl flows %s after its first packet:\n%s", time.Since(deniedAt).Round(time.Millisecond), out)
	since = sinceNow()
	guardAt := time.Now()
	if out, err := connect(7070); err == nil {
		t.Fatalf("client -> server:7070 connected (%q): tier security's guard denies it", out)
	}
	out = waitFlows("tier security's deny", 10*time.Second-time.Since(guardAt), []string{"-n", flowsNS, "--verdict", "deny", "--port", "7070", "--since", since},
		server+" ", "TCP/7070", "ingress security/gnp:security.guard[0] Deny")
	t.Logf("the GlobalNetworkPolicy's deny in routedctl flows %s after its first packet:\n%s", time.Since(guardAt).Round(time.Millisecond), out)
	if strings.Contains(flows("-n", flowsNS, "--port", "9090", "--verdict", "allow", "--node", server), "TCP/9090") {
		t.Errorf("the server's node recorded the denied connection as allowed")
	}

	// The page, from the aggregator in the cluster, through the same
	// port-forward: the denied flows marked; filtered to the denied
	// flows of the namespace and a policy, each names its rule.
	page := flowpagetest.Open(t, r.url, readToken(t, fl.token))
	page.Wait("the denied flows of "+flowsNS+" marked", `[...document.querySelectorAll("#flows tr.flow.denied")].filter((r) => r.textContent.includes("`+flowsNS+`/server")).length >= 2`)
	page.SetFilter("f-namespace", flowsNS)
	page.Wait("only flows of "+flowsNS+" after the filter", `[...document.querySelectorAll("#flows tr.flow")].every((r) => r.textContent.includes("`+flowsNS+`/"))`)
	if path := os.Getenv("FLOWS_SCREENSHOT"); path != "" {
		page.Screenshot(path)
	}
	page.SetFilter("f-verdict", "deny")
	// (The policy filter matches a policy anywhere in a trace: 9090's
	// passed tier security's guard, so port 7070 picks the guard's deny.)
	for _, p := range []struct{ port, policy, rule string }{
		{"7070", "", "ingress Deny gnp:security.guard rule 0"},
		{"", "web", "ingress Deny np:" + flowsNS + "/web rule 1"},
	} {
		page.SetFilter("f-port", p.port)
		page.SetFilter("f-policy", p.policy)
		page.Wait("only denied flows of "+flowsNS+" decided by "+p.rule, fmt.Sprintf(`(() => { const rows = document.querySelectorAll("#flows tr.flow");
			return rows.length >= 1 && [...rows].every((r) => r.classList.contains("denied") && r.querySelector("td.rule").textContent.includes(%q)) })()`, p.rule))
		if rule := page.Text("#flows tr.denied td.rule"); !strings.Contains(rule, p.rule) {
			t.Errorf("the page's denied row filtered to port %q, policy %q names %q, want %q", p.port, p.policy, rule, p.rule)
		}
	}

	// The server node's JSON lines for log shippers hold the denied flow
	// with its rule.
	checkFlowsFile(t, c.Nodes[1].HostPath("/var/log/routed/flows.jsonl"), flowsNS)

	flowsResume(ctx, t, c, r, filepath.Join(dir, "port-forward-2.log"), connect)
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

// flowsPodsYAML is a server pod on node server listening on 7070, 8080
// and 9090 (each connection answered "ok"), and a client pod on node client.
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
	serve := "for p in 7070 8080 9090; do /bin/busybox nc -ll -p $p -e /bin/busybox echo ok & done; wait"
	return pod("server", server, "app: server", serve) + "---\n" + pod("client", client, "app: client", "exec /bin/busybox sleep 3600")
}
