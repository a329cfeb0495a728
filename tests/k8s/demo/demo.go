package demo

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/routed-net/routed/internal/ociimage"
	"github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// RoutedImage is the tag the demo builds routed's image under; the
// overlay points the shipped manifests at it.
const RoutedImage = "docker.io/library/routed:k8s-demo"

// Up brings up the demo's cluster (two nodes, prefix rk8s, subnet
// 10.251.0.0/24) in dir with bin/routed as its etcd, building the
// Kubernetes binaries first when the cache has none. The cluster it
// returns must be taken Down in every case, also with an error.
func Up(ctx context.Context, dir, bin string, logf func(string, ...any)) (*cluster.Cluster, error) {
	api, err := kubeapiserver.Build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, logf)
	if err != nil {
		return nil, err
	}
	node, err := kubeapiserver.BuildNode(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, logf)
	if err != nil {
		return nil, err
	}
	return cluster.Up(ctx, cluster.Config{Dir: dir, Prefix: "rk8s", Subnet: netip.MustParsePrefix("10.251.0.0/24"), Nodes: 2,
		Routed: filepath.Join(bin, "routed"), KubeAPIServer: api, KubeNode: node, Logf: logf})
}

// Install installs routed with `kubectl apply -k` of an overlay on the
// shipped manifests (image reference and etcd endpoint only) into the
// running cluster c and waits until the routed-node DaemonSet and the
// routed-controllers Deployment are Ready and namespace default has its
// profile. It returns the overlay directory (for `kubectl delete -k`;
// the caller removes it) also on failure, when it was written.
func Install(ctx context.Context, c *cluster.Cluster, root, bin string, logf func(string, ...any)) (overlay string, err error) {
	return InstallFrom(ctx, c, root, bin, filepath.Join(root, "deploy", "base"), logf)
}

// InstallFrom is Install with base (a kustomization directory built on
// deploy/base, such as docs/migrate-calico-overlay) in place of
// deploy/base. A routed-node DaemonSet that matches no node yet counts
// as rolled out.
func InstallFrom(ctx context.Context, c *cluster.Cluster, root, bin, base string, logf func(string, ...any)) (overlay string, err error) {
	step := func(format string, a ...any) { logf("==> "+format, a...) }
	kubectl := func(args ...string) (string, error) { return c.Kubectl(ctx, args...) }
	routedctl := func(args ...string) (string, error) { return Routedctl(ctx, c, bin, args...) }

	step("routed's image, built without Docker (deploy/build.sh + internal/ociimage), imported into containerd")
	tree := filepath.Join(os.TempDir(), fmt.Sprintf("routed-k8s-image-%d", os.Getpid()))
	defer os.RemoveAll(tree)
	build := exec.CommandContext(ctx, "sh", "deploy/build.sh", tree)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("deploy/build.sh: %v: %s", err, out)
	}
	tar := tree + ".tar"
	defer os.Remove(tar)
	if _, err := ociimage.WriteFile(tar, RoutedImage, tree, ociimage.Config{Entrypoint: []string{"/usr/local/bin/routed"}}); err != nil {
		return "", err
	}
	if err := c.ImportImage(ctx, tar); err != nil {
		return "", err
	}

	step("kubectl apply -k: %s with an overlay for the image and the etcd endpoint (TLS: its CA and client certificate in the Secrets, their paths in routed-config)", base)
	overlay, err = writeOverlay(base, c)
	if err != nil {
		return "", err
	}
	if out, err := kubectl("apply", "-k", overlay); err != nil {
		return overlay, err
	} else {
		logf("%s", out)
	}
	step("routed-node DaemonSet Ready")
	if out, err := kubectl("-n", "kube-system", "rollout", "status", "ds/routed-node", "--timeout=180s"); err != nil {
		logf("routed pod logs:\n%s", podLogs(ctx, c, "kube-system", "app.kubernetes.io/name=routed"))
		return overlay, err
	} else {
		logf("%s", out)
	}
	if out, err := kubectl("-n", "kube-system", "get", "ds", "routed-node", "-o", "wide"); err == nil {
		logf("%s", out)
	}

	// Without the controllers no namespace has its kns.<ns> profile, and
	// a pod whose endpoint names a missing profile passes no traffic.
	step("routed-controllers Deployment Ready, namespace default's profile kns.default written")
	if out, err := kubectl("-n", "kube-system", "rollout", "status", "deploy/routed-controllers", "--timeout=180s"); err != nil {
		logf("routed-controllers logs:\n%s", podLogs(ctx, c, "kube-system", "app.kubernetes.io/component=controllers"))
		return overlay, err
	} else {
		logf("%s", out)
	}
	step("routed-cluster-gc Deployment Ready, one of its pods elected for the cluster-wide GC")
	if err := waitClusterGC(ctx, c, logf); err != nil {
		return overlay, err
	}
	if err := cluster.WaitFor(ctx, 60*time.Second, "profile kns.default", func() error {
		_, err := routedctl("get", "profile", "kns.default")
		return err
	}); err != nil {
		logf("routed-controllers logs:\n%s", podLogs(ctx, c, "kube-system", "app.kubernetes.io/component=controllers"))
		return overlay, err
	}
	if err := livez(ctx, c, "controllers", "9095", logf); err != nil {
		return overlay, err
	}
	return overlay, nil
}

// Routedctl runs bin/routedctl against the cluster's routed etcd.
func Routedctl(ctx context.Context, c *cluster.Cluster, bin string, args ...string) (string, error) {
	tls := c.EtcdTLS
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "routedctl"), append([]string{"--etcd-endpoints", c.RoutedEtcd,
		"--etcd-ca-cert-file", tls.CAFile, "--etcd-cert-file", tls.ClientCert, "--etcd-key-file", tls.ClientKey}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("routedctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Run installs routed (Install) into the running cluster c and checks
// it (Check). bin holds routedctl. It returns the first failure.
func Run(ctx context.Context, c *cluster.Cluster, root, bin string, logf func(string, ...any)) error {
	overlay, err := Install(ctx, c, root, bin, logf)
	if overlay != "" {
		defer os.RemoveAll(overlay)
	}
	if err != nil {
		return err
	}
	return Check(ctx, c, root, bin, overlay, logf)
}

// Check checks routed, installed from overlay (Install), as an
// operator does, step by step, logging as it goes: install-cni's files,
// pods with pool addresses and endpoints, ping across nodes, the route
// reflector, a restart, and `kubectl delete -k` leaving nothing behind.
// It returns the first failure.
func Check(ctx context.Context, c *cluster.Cluster, root, bin, overlay string, logf func(string, ...any)) (err error) {
	current := ""
	step := func(format string, a ...any) {
		current = fmt.Sprintf(format, a...)
		logf("==> %s", current)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%s: %w", current, err)
		}
	}()
	kubectl := func(args ...string) (string, error) { return c.Kubectl(ctx, args...) }
	routedctl := func(args ...string) (string, error) { return Routedctl(ctx, c, bin, args...) }

	step("install-cni's files on every node (the kubelet's CNI dirs)")
	files := []string{"/opt/cni/bin/routed-cni", "/opt/cni/bin/routed-ipam", "/opt/cni/bin/loopback", "/opt/cni/bin/portmap", "/opt/cni/bin/bandwidth",
		"/etc/cni/net.d/10-routed.conflist", "/etc/cni/net.d/routed-kubeconfig",
		"/etc/cni/net.d/routed-tls", "/etc/cni/net.d/routed-tls/etcd-ca", "/etc/cni/net.d/routed-tls/etcd-cert", "/etc/cni/net.d/routed-tls/etcd-key"}
	private := map[string]os.FileMode{"/etc/cni/net.d/routed-kubeconfig": 0o600, "/etc/cni/net.d/routed-tls": os.ModeDir | 0o700,
		"/etc/cni/net.d/routed-tls/etcd-key": 0o600, "/etc/cni/net.d/routed-tls/etcd-cert": 0o600, "/etc/cni/net.d/routed-tls/etcd-ca": 0o600}
	for _, n := range c.Nodes {
		if err := cluster.WaitFor(ctx, 60*time.Second, "routed-kubeconfig written by routed on "+n.Name, func() error {
			_, err := os.Stat(n.HostPath("/etc/cni/net.d/routed-kubeconfig"))
			return err
		}); err != nil {
			return err
		}
		logf("  %s:", n.Name)
		for _, f := range files {
			st, err := os.Stat(n.HostPath(f))
			if err != nil {
				return fmt.Errorf("install-cni on %s: %w", n.Name, err)
			}
			if want, ok := private[f]; ok && st.Mode() != want {
				return fmt.Errorf("install-cni on %s: %s has mode %s, want %s", n.Name, f, st.Mode(), want)
			}
			logf("  %s %8d %s", st.Mode(), st.Size(), f)
		}
	}

	step("a Deployment of 10 pods")
	var out string
	if err := applyYAML(ctx, c, deploymentYAML); err != nil {
		return err
	}
	if out, err := kubectl("rollout", "status", "deployment/web", "--timeout=180s"); err != nil {
		logf("%s", describe(ctx, c))
		return err
	} else {
		logf("%s", out)
	}
	pods, err := podIPs(ctx, c, "app=web")
	if err != nil {
		return err
	}
	pool := netip.MustParsePrefix("192.168.0.0/16")
	if len(pods) != 10 {
		return fmt.Errorf("want 10 Running pods, have %d: %v", len(pods), pods)
	}
	for name, ip := range pods {
		if a, err := netip.ParseAddr(ip); err != nil || !pool.Contains(a) {
			return fmt.Errorf("pod %s has %q, not an address from the pool %s", name, ip, pool)
		}
	}
	out, _ = kubectl("get", "pods", "-o", "wide")
	logf("%s", out)

	step("each pod's WorkloadEndpoint, with its labels")
	out, err = routedctl("get", "wep", "-o", "yaml")
	if err != nil {
		return err
	}
	for name := range pods {
		if !strings.Contains(out, "pod: "+name) {
			return fmt.Errorf("no WorkloadEndpoint for pod %s", name)
		}
	}
	if n := strings.Count(out, "app: web"); n < 10 {
		return fmt.Errorf("%d WorkloadEndpoints carry the pods' label app=web, want 10", n)
	}
	wide, _ := routedctl("get", "wep", "-o", "wide")
	logf("%s", wide)

	step("a pod asking for 192.168.77.7 with cni.projectcalico.org/ipAddrs")
	if err := applyYAML(ctx, c, fixedPodYAML); err != nil {
		return err
	}
	if _, err := kubectl("wait", "--for=condition=Ready", "pod/fixed", "--timeout=120s"); err != nil {
		logf("%s", describe(ctx, c))
		return err
	}
	fixed, err := kubectl("get", "pod", "fixed", "-o", "jsonpath={.status.podIP}")
	if err != nil || fixed != "192.168.77.7" {
		return fmt.Errorf("pod fixed got %q, want 192.168.77.7 (%v)", fixed, err)
	}
	logf("pod fixed: %s", fixed)

	step("pod to pod: kubectl exec ... ping")
	nodeOf, err := podNodes(ctx, c, "app=web")
	if err != nil {
		return err
	}
	from, to := crossNodePair(nodeOf, c.Node)
	targets := []string{fixed, pods[to]}
	if len(c.Nodes) > 1 && nodeOf[to] == c.Node {
		return fmt.Errorf("no web pod was scheduled on %s: %v", c.Nodes[1].Name, nodeOf)
	}
	for _, ip := range targets {
		// Three pings without a loss, retried: a pod Running a moment ago
		// may still be waiting for its block's route on the other node.
		var out string
		if err := cluster.WaitFor(ctx, 60*time.Second, from+" pings "+ip+" without loss", func() error {
			var err error
			out, err = kubectl("exec", from, "--", "/bin/busybox", "ping", "-c", "3", "-W", "2", ip)
			if err != nil || !strings.Contains(out, " 0% packet loss") {
				return fmt.Errorf("%v\n%s", err, out)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("%s cannot ping %s: %w", from, ip, err)
		}
		logf("%s (%s) -> %s: %s", from, nodeOf[from], ip, lastLine(out, "packet loss"))
	}
	if len(c.Nodes) > 1 {
		// The pool's blocks are /26s: the block of the pod on the other
		// node, as routed on this node learned it over BGP from that node.
		block := netip.PrefixFrom(netip.MustParseAddr(pods[to]), 26).Masked().String()
		var learned string
		if err := cluster.WaitFor(ctx, 30*time.Second, "routed on "+c.Node+" lists "+block+" from "+c.Nodes[1].Addr.String(), func() error {
			var err error
			if learned, err = RoutedOn(ctx, c, c.Node, "show", "route"); err != nil {
				return err
			}
			if !hasRow(learned, block, c.Nodes[1].Addr.String()) {
				return fmt.Errorf("not listed:\n%s", learned)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("routed on %s did not learn %s (the block of %s on %s) over BGP from %s: %w", c.Node, block, to, nodeOf[to], c.Nodes[1].Addr, err)
		}
		logf("%s is on %s: that ping crossed nodes; routed on %s learned its block %s over BGP from %s:\n%s", to, nodeOf[to], c.Node, block, c.Nodes[1].Addr, learned)
		out, err := routedStatus(ctx, c, c.Node)
		if err != nil {
			return err
		}
		logf("routedctl node status on %s:\n%s", c.Node, out)
	}

	step("pods deleted: their addresses released")
	if _, err := kubectl("delete", "deployment", "web", "--wait=true"); err != nil {
		return err
	}
	if _, err := kubectl("delete", "pod", "fixed", "--wait=true"); err != nil {
		return err
	}
	if err := cluster.WaitFor(ctx, 120*time.Second, "every pod address released", func() error {
		out, err := routedctl("ipam", "show")
		if err != nil {
			return err
		}
		for _, ip := range append(values(pods), fixed) {
			if o, _ := routedctl("ipam", "show", "--ip", ip); strings.Contains(o, "k8s-pod-network") {
				return fmt.Errorf("%s still allocated:\n%s", ip, out)
			}
		}
		return nil
	}); err != nil {
		return err
	}
	out, err = routedctl("ipam", "check")
	if err != nil {
		return err
	}
	logf("%s", out)

	if len(c.Nodes) > 1 {
		if err := routeReflectorPod(ctx, c, root, routedctl, step, logf); err != nil {
			return err
		}
	}

	step("%d pods started while routed restarts on every node", scaleUpPods)
	if err := scaleUpThroughRestart(ctx, c, bin, logf); err != nil {
		return err
	}

	step("routed restarted (kubectl rollout restart): its files stay on the host")
	// install-cni and routed write their files again as they start; the
	// CNI plugin's log is nobody's to rewrite: only an uninstall removes it.
	const cniLog = "/var/log/routed/cni.log"
	before, err := os.Stat(cniLog)
	if err != nil {
		return fmt.Errorf("the CNI plugin's log: %w", err)
	}
	if _, err := kubectl("-n", "kube-system", "rollout", "restart", "ds/routed-node"); err != nil {
		return err
	}
	if _, err := kubectl("-n", "kube-system", "rollout", "status", "ds/routed-node", "--timeout=120s"); err != nil {
		return err
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("after a restart of routed: %w", err)
		}
	}
	if after, err := os.Stat(cniLog); err != nil || after.Size() < before.Size() {
		return fmt.Errorf("a restart of routed removed or truncated %s (%v)", cniLog, err)
	}
	logf("%d files and the CNI log still in place after the restart", len(files))

	step("kubectl delete -k: no routed files left on the host")
	if _, err := kubectl("delete", "-k", overlay, "--wait=true"); err != nil {
		return err
	}
	if err := cluster.WaitFor(ctx, 90*time.Second, "routed's pod gone", func() error {
		out, err := kubectl("-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=routed", "-o", "name")
		if err == nil && strings.TrimSpace(out) != "" {
			err = fmt.Errorf("still there: %s", out)
		}
		return err
	}); err != nil {
		return err
	}
	var left []string
	var paths []string
	for _, n := range c.Nodes {
		for _, p := range append(cluster.HostPaths, "/opt/cni/bin/loopback", "/opt/cni/bin/portmap", "/opt/cni/bin/bandwidth") {
			paths = append(paths, n.HostPath(p))
		}
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		switch {
		case err != nil:
		case st.IsDir():
			// hostPath mount points stay; what was in them must not.
			if entries, _ := os.ReadDir(p); len(entries) > 0 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				left = append(left, fmt.Sprintf("%s (%d entries: %s)", p, len(entries), strings.Join(names, " ")))
			}
		default:
			left = append(left, p)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("routed's files left on the host after kubectl delete: %v", left)
	}
	logf("no routed files left on %d node(s): %s checked (the hostPath directories kubelet created stay, empty)", len(c.Nodes), strings.Join(cluster.HostPaths, " "))
	return nil
}

// writeOverlay writes, in a new temporary directory, a kustomization of
// the directory of (deploy/base or one built on it) for the cluster c:
// routed's image as the demo imports it, routed's etcd and its TLS.
func writeOverlay(of string, c *cluster.Cluster) (string, error) {
	dir, err := os.MkdirTemp("", "routed-k8s-overlay-")
	if err != nil {
		return "", err
	}
	base, err := filepath.Rel(dir, of)
	if err != nil {
		return "", err
	}
	secrets, err := secretPatches(c, "routed-etcd-secrets", "routed-cni-etcd-secrets", "routed-controllers-etcd-secrets", "routed-cluster-gc-etcd-secrets")
	if err != nil {
		return "", err
	}
	name, tag, _ := strings.Cut(RoutedImage, ":")
	k := fmt.Sprintf(`# The shipped manifests, with the image reference and the etcd endpoint
# changed (TLS: the Secrets hold the CA and a client certificate,
# routed-config names the files as mounted); nothing else.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: ghcr.io/routed-net/routed
  newName: %s
  newTag: %s
patches:
- target: {kind: ConfigMap, name: routed-config}
  patch: |-
    - op: replace
      path: /data/etcd_endpoints
      value: %s
    - op: replace
      path: /data/etcd_ca
      value: /etc/routed/etcd-secrets/etcd-ca
    - op: replace
      path: /data/etcd_cert
      value: /etc/routed/etcd-secrets/etcd-cert
    - op: replace
      path: /data/etcd_key
      value: /etc/routed/etcd-secrets/etcd-key
%s`, base, name, tag, c.RoutedEtcd, secrets)
	return dir, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644)
}

// secretPatches fills the named etcd Secrets with the cluster's etcd CA
// and client certificate, as an operator does with kubectl create
// secret --from-file.
func secretPatches(c *cluster.Cluster, names ...string) (string, error) {
	var data []string
	for _, f := range []struct{ key, path string }{{"etcd-ca", c.EtcdTLS.CAFile}, {"etcd-cert", c.EtcdTLS.ClientCert}, {"etcd-key", c.EtcdTLS.ClientKey}} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			return "", err
		}
		data = append(data, fmt.Sprintf("%s: %s", f.key, base64.StdEncoding.EncodeToString(b)))
	}
	var out strings.Builder
	for _, n := range names {
		fmt.Fprintf(&out, "- target: {kind: Secret, name: %s}\n  patch: |-\n    - op: add\n      path: /data\n      value: {%s}\n", n, strings.Join(data, ", "))
	}
	return out.String(), nil
}

const deploymentYAML = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 10
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web, tier: demo}}
    spec:
      automountServiceAccountToken: false
      terminationGracePeriodSeconds: 1
      containers:
      - name: busybox
        image: ` + cluster.BusyboxImage + `
        imagePullPolicy: Never
        command: ["/bin/busybox", "sleep", "3600"]
`

const fixedPodYAML = `apiVersion: v1
kind: Pod
metadata:
  name: fixed
  namespace: default
  annotations: {cni.projectcalico.org/ipAddrs: '["192.168.77.7"]'}
spec:
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: busybox
    image: ` + cluster.BusyboxImage + `
    imagePullPolicy: Never
    command: ["/bin/busybox", "sleep", "3600"]
`

func applyYAML(ctx context.Context, c *cluster.Cluster, yaml string) error {
	f, err := os.CreateTemp("", "routed-k8s-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(yaml); err != nil {
		return err
	}
	f.Close()
	_, err = c.Kubectl(ctx, "apply", "-f", f.Name())
	return err
}

// podNodes maps the Running pods of selector to their nodes.
func podNodes(ctx context.Context, c *cluster.Cluster, selector string) (map[string]string, error) {
	out, err := c.Kubectl(ctx, "get", "pods", "-l", selector, "-o", "jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName}{\"\\n\"}{end}")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if name, node, ok := strings.Cut(line, " "); ok {
			m[name] = node
		}
	}
	return m, nil
}

// crossNodePair picks a pod on first and, if there is one, a pod on
// another node (else another pod on first).
func crossNodePair(nodeOf map[string]string, first string) (from, to string) {
	for p, n := range nodeOf {
		if n == first && from == "" {
			from = p
		}
	}
	for p, n := range nodeOf {
		if n != first {
			return from, p
		}
	}
	for p := range nodeOf {
		if p != from {
			return from, p
		}
	}
	return from, from
}

// routedStatus is `routedctl node status` in the routed-node pod on node.
func routedStatus(ctx context.Context, c *cluster.Cluster, node string) (string, error) {
	return RoutedOn(ctx, c, node, "node", "status")
}

// routedOn runs routedctl in the routed-node pod on node.
func RoutedOn(ctx context.Context, c *cluster.Cluster, node string, args ...string) (string, error) {
	pod, err := c.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/component=node", "--field-selector", "spec.nodeName="+node, "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil {
		return "", err
	}
	return c.Kubectl(ctx, append([]string{"-n", "kube-system", "exec", pod, "-c", "routed", "--", "routedctl"}, args...)...)
}

func podIPs(ctx context.Context, c *cluster.Cluster, selector string) (map[string]string, error) {
	out, err := c.Kubectl(ctx, "get", "pods", "-l", selector, "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Status   struct{ Phase, PodIP string }
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, p := range list.Items {
		if p.Status.Phase == "Running" && p.Status.PodIP != "" {
			m[p.Metadata.Name] = p.Status.PodIP
		}
	}
	return m, nil
}

func values(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

func lastLine(s, containing string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, containing) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func describe(ctx context.Context, c *cluster.Cluster) string {
	out, _ := c.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
	ev, _ := c.Kubectl(ctx, "get", "events", "-A", "--sort-by=.lastTimestamp")
	return out + "\n" + cluster.LastLines(ev, 30) + "\nkubelet:\n" + c.Logs("kubelet", 30)
}

func podLogs(ctx context.Context, c *cluster.Cluster, ns, selector string) string {
	out, _ := c.Kubectl(ctx, "-n", ns, "logs", "-l", selector, "--all-containers", "--tail=40")
	return out + "\n" + describe(ctx, c)
}
