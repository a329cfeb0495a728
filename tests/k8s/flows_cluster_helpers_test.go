package k8s_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/demo"
)

// flowsClusterIP is the routed-flows Service's address in
// TestFlowsOnCluster. The test cluster runs no DNS, so routed-node
// (host network) cannot resolve the Service's name as it does with
// the cluster's DNS: the overlay pins the Service's ClusterIP and names
// it in ROUTED_FLOWS_AGGREGATOR, and the certificate carries it
// (secrets.sh's FLOWS_EXTRA_SANS).
const flowsClusterIP = "10.96.0.99"

// flowsInstall is what an operator keeps from deploy/flows/secrets.sh:
// the aggregator's CA and the readers' token.
type flowsInstall struct{ ca, token string }

// installFlows does what docs/flows.md's "Deploying" says, on the
// cluster where demo.Install applied overlay: deploy/flows/secrets.sh
// with the cluster's etcd CA, routed-node's etcd identity as CN
// routed-node (docs/etcd-rbac.md; the demo's is a generic client
// certificate), then an overlay of the demo's with the deploy/flows
// component, applied with kubectl apply -k; it waits for routed-node's
// rollout and the aggregator.
func installFlows(ctx context.Context, t *testing.T, c *k8scluster.Cluster, demoOverlay string) flowsInstall {
	t.Helper()
	pki := filepath.Join(t.TempDir(), "routed-flows-pki")
	script := exec.CommandContext(ctx, "sh", deployPath("flows/secrets.sh"), c.EtcdTLS.CAFile, pki)
	script.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "FLOWS_EXTRA_SANS=IP:"+flowsClusterIP)
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("deploy/flows/secrets.sh: %v\n%s", err, out)
	} else {
		t.Logf("deploy/flows/secrets.sh:\n%s", out)
	}

	cert, key := c.EtcdTLS.IssueClient(t, "routed-node")
	var data []string
	for _, f := range []struct{ key, path string }{{"etcd-ca", c.EtcdTLS.CAFile}, {"etcd-cert", cert}, {"etcd-key", key}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, fmt.Sprintf("%s: %s", f.key, base64.StdEncoding.EncodeToString(b)))
	}
	dir := t.TempDir()
	// The demo's overlay points its own objects at the demo's image;
	// the component's come in here, so this overlay points them too.
	imageName, imageTag, _ := strings.Cut(demo.RoutedImage, ":")
	k := fmt.Sprintf(`# The demo's overlay (deploy/base, image, etcd) with flows on.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
components:
- %s
images:
- name: ghcr.io/routed-net/routed
  newName: %s
  newTag: %s
patches:
- target: {kind: Secret, name: routed-etcd-secrets}
  patch: |-
    - op: replace
      path: /data
      value: {%s}
- target: {kind: Service, name: routed-flows}
  patch: |-
    - op: add
      path: /spec/clusterIP
      value: %s
- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata: {name: routed-node, namespace: kube-system}
    spec:
      template:
        spec:
          containers:
          - name: routed
            env:
            - name: ROUTED_FLOWS_AGGREGATOR
              value: https://%s:9443
`, relPath(t, dir, demoOverlay), relPath(t, dir, deployPath("flows")), imageName, imageTag, strings.Join(data, ", "), flowsClusterIP, flowsClusterIP)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl apply -k (deploy/flows on the demo's overlay):\n%s", kubectlOK(ctx, t, c, "apply", "-k", dir))
	for _, w := range []string{"ds/routed-node", "deploy/routed-flows-aggregator"} {
		if out, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", w, "--timeout=240s"); err != nil {
			logs, _ := c.Kubectl(ctx, "-n", "kube-system", "logs", "-l", "app.kubernetes.io/name=routed", "--all-containers", "--tail=30", "--prefix")
			pods, _ := c.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
			failOnCluster(t, c, "rollout of "+w, fmt.Errorf("%w\n%s\npods:\n%s\nlogs:\n%s", err, out, pods, logs))
		}
	}
	env := kubectlOK(ctx, t, c, "-n", "kube-system", "get", "ds", "routed-node", "-o", "jsonpath={.spec.template.spec.containers[?(@.name==\"routed\")].env[*].name}")
	for _, want := range []string{"ROUTED_FLOWS_GROUP", "ROUTED_FLOWS_FILE", "ROUTED_FLOWS_AGGREGATOR", "ROUTED_FLOWS_AGGREGATOR_CA_FILE"} {
		if !strings.Contains(env, want) {
			t.Fatalf("routed-node's routed container lacks %s after the apply: %s", want, env)
		}
	}
	return flowsInstall{ca: filepath.Join(pki, "ca.pem"), token: filepath.Join(pki, "token")}
}

// kubectlOK runs kubectl on the cluster and fails the test on an error.
func kubectlOK(ctx context.Context, t *testing.T, c *k8scluster.Cluster, args ...string) string {
	t.Helper()
	out, err := c.Kubectl(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// applyManifest writes yaml to path and applies it.
func applyManifest(ctx context.Context, t *testing.T, c *k8scluster.Cluster, path, yaml string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectlOK(ctx, t, c, "apply", "-f", path)
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 9443`)

// portForward runs `kubectl port-forward svc/routed-flows` to a free
// local port, as an operator reaches the aggregator, and returns its
// https URL; the test's cleanup stops it (by its PID).
func portForward(ctx context.Context, t *testing.T, c *k8scluster.Cluster, logPath string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "kubectl", "--kubeconfig", c.Kubeconfig, "-n", "kube-system", "port-forward",
		"--address", "127.0.0.1", "svc/routed-flows", ":9443")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = io.MultiWriter(pw, logf), logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		pw.Close()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("kubectl port-forward's output:\n%s", b)
		}
	})
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case port <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case p := <-port:
		return "https://127.0.0.1:" + p
	case <-time.After(30 * time.Second):
		b, _ := os.ReadFile(logPath)
		t.Fatalf("kubectl port-forward svc/routed-flows: no local port within 30 s:\n%s", b)
	}
	return ""
}

// flowsDenyRule is how routedctl flows names the NetworkPolicy web's
// deny rule in TestFlowsOnCluster.
const flowsDenyRule = "ingress default/np:" + flowsNS + "/web[1] Deny"

// flowsReader runs routedctl flows against the aggregator as an
// operator does: at url (the port-forward's), with the aggregator's CA
// and the readers' token.
type flowsReader struct {
	ctx                 context.Context
	t                   *testing.T
	ctl, url, ca, token string
}

// flows runs routedctl flows with args and returns its output.
func (r *flowsReader) flows(args ...string) string {
	r.t.Helper()
	cmd := exec.CommandContext(r.ctx, r.ctl, append([]string{"flows", "--server", r.url, "--ca-file", r.ca, "--token-file", r.token}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("routedctl flows %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// wait runs routedctl flows with args until its output holds every
// want, for at most limit, and returns that output.
func (r *flowsReader) wait(what string, limit time.Duration, args []string, want ...string) string {
	r.t.Helper()
	var out string
	testenv.Eventually(r.t, limit, 200*time.Millisecond, func() string {
		out = r.flows(args...)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return fmt.Sprintf("%s: routedctl flows %s lacks %q:\n%s", what, strings.Join(args, " "), w, out)
			}
		}
		return ""
	})
	return out
}

// sinceNow is routedctl flows --since for "from now on": the flows of
// intervals ending after this instant (to the nanosecond, so an
// interval that ended a moment ago is not taken for a new one).
func sinceNow() string { return time.Now().UTC().Format(time.RFC3339Nano) }
