package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/routed-net/routed/cniplugin/install"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/tests/testbin"
)

var update = flag.Bool("update", false, "regenerate deploy/routed.yaml from deploy/base")

const routedYAMLHeader = `# routed on Kubernetes: ConfigMap routed-config, Secret
# routed-etcd-secrets, ServiceAccounts and RBAC, DaemonSet routed-node.
# Set etcd_endpoints in routed-config first; see deploy/README.md.
# Route reflectors: deploy/rr-mode.yaml.
#
# Generated from deploy/base (the files of its kustomization.yaml, in
# order). Maintainers: edit deploy/base and regenerate with
#   go test ./tests/k8s -run TestRoutedYAMLIsBase -update
`

// TestRoutedYAMLIsBase: deploy/routed.yaml is the base's files joined
// (comments kept), and `kubectl kustomize deploy/base` renders exactly
// the same objects.
func TestRoutedYAMLIsBase(t *testing.T) {
	base := deployPath("base")
	var k struct {
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: %v (resources %v)", err, k.Resources)
	}
	var want bytes.Buffer
	want.WriteString(routedYAMLHeader)
	for _, r := range k.Resources {
		part, err := os.ReadFile(filepath.Join(base, r))
		if err != nil {
			t.Fatalf("resource %s: %v", r, err)
		}
		want.WriteString("---\n# Source: deploy/base/" + r + "\n")
		want.Write(part)
		if !bytes.HasSuffix(part, []byte("\n")) {
			want.WriteString("\n")
		}
	}
	path := deployPath("routed.yaml")
	if *update {
		if err := os.WriteFile(path, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("deploy/routed.yaml is not deploy/base joined; edit deploy/base and run\n  go test ./tests/k8s -run TestRoutedYAMLIsBase -update")
	}

	out, stderr, err := kubectl(t, nil, "kustomize", base)
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", base, err, stderr)
	}
	rendered := byID(t, parseDocs(t, []byte(out), "kustomize output"), "kustomize output")
	plain := byID(t, readDocs(t, path), "routed.yaml")
	if !reflect.DeepEqual(sortedKeys(rendered), sortedKeys(plain)) {
		t.Fatalf("objects differ:\nkustomize: %v\nrouted.yaml: %v", sortedKeys(rendered), sortedKeys(plain))
	}
	for id, o := range plain {
		if !reflect.DeepEqual(normalize(t, o), normalize(t, rendered[id])) {
			a, _ := yaml.Marshal(o)
			b, _ := yaml.Marshal(rendered[id])
			t.Errorf("%s differs:\nrouted.yaml:\n%s\nkustomize:\n%s", id, a, b)
		}
	}
}

// normalize round-trips through JSON so number types compare equal.
func normalize(t testing.TB, o object) any {
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	json.Unmarshal(b, &v)
	return v
}

// manifests sorts deploy/*.yaml into Kubernetes manifests (kubectl) and
// routed resource files (routedctl); a file never mixes both.
func manifests(t *testing.T) (kube, routed []string) {
	t.Helper()
	files, err := filepath.Glob(deployPath("*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in deploy/: %v", err)
	}
	for _, f := range files {
		docs := readDocs(t, f)
		nr := 0
		for _, o := range docs {
			if isRoutedResource(o) {
				nr++
			}
		}
		switch {
		case len(docs) == 0:
			t.Fatalf("%s holds no objects", f)
		case nr == len(docs):
			routed = append(routed, f)
		case nr == 0:
			kube = append(kube, f)
		default:
			t.Fatalf("%s mixes Kubernetes objects and routed resources: kubectl cannot apply routed's, routedctl not Kubernetes'", f)
		}
	}
	return kube, routed
}

// TestManifestsServerDryRun: every Kubernetes manifest in deploy/ and
// the kustomize base pass the real API server's validation, strictly
// (unknown or duplicate fields are errors), with no warnings.
func TestManifestsServerDryRun(t *testing.T) {
	srv := cluster(t)
	kube, _ := manifests(t)
	out, stderr, err := kubectl(t, nil, "kustomize", deployPath("base"))
	if err != nil {
		t.Fatalf("kubectl kustomize: %v\n%s", err, stderr)
	}
	rendered := filepath.Join(t.TempDir(), "kustomize-base.yaml")
	if err := os.WriteFile(rendered, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(kube) < 2 {
		t.Fatalf("expected routed.yaml and rr-mode.yaml among the Kubernetes manifests, got %v", kube)
	}
	for _, f := range append(kube, rendered) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			docs := readDocs(t, f)
			stdout, stderr, err := kubectl(t, srv, "apply", "--dry-run=server", "--validate=strict", "-f", f)
			if err != nil {
				t.Fatalf("kubectl apply --dry-run=server --validate=strict -f %s: %v\n%s%s", f, err, stdout, stderr)
			}
			if w := warnings(stderr); w != "" {
				t.Errorf("the API server warned:\n%s", w)
			}
			if n := strings.Count(stdout, "(server dry run)"); n != len(docs) {
				t.Errorf("%d objects accepted, the file has %d:\n%s", n, len(docs), stdout)
			}
			t.Logf("%s: %d objects valid", filepath.Base(f), len(docs))
		})
	}

	// The check has teeth: a misspelt field fails.
	bad := strings.Replace(readFile(t, deployPath("routed.yaml")), "hostNetwork: true", "hostNetwrk: true", 1)
	badFile := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(badFile, []byte(bad), 0o644)
	stdout, stderr, err := kubectl(t, srv, "apply", "--dry-run=server", "--validate=strict", "-f", badFile)
	if err == nil || !strings.Contains(stdout+stderr, "unknown field") || !strings.Contains(stdout+stderr, "hostNetwrk") {
		t.Fatalf("a misspelt field was not refused (err %v):\n%s%s", err, stdout, stderr)
	}
}

// warnings returns what kubectl wrote to stderr (the API server's
// warnings), leaving out only notes on the client's version skew.
func warnings(stderr string) string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.Contains(l, "version difference") || strings.Contains(l, "version skew") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRoutedResourcesApply: the routed resource files in deploy/ (the
// route reflector peering) apply cleanly with routedctl.
func TestRoutedResourcesApply(t *testing.T) {
	_, routed := manifests(t)
	if len(routed) == 0 {
		t.Fatal("no routed resource file in deploy/ (expected rr-mode-routed.yaml)")
	}
	etcd := etcdtest.Start(t)
	ctl := testbin.Path(t, "routedctl")
	for _, f := range routed {
		for _, args := range [][]string{{"apply", "-f", f}, {"apply", "-f", f}, {"get", "bgppeers"}} {
			cmd := exec.CommandContext(context.Background(), ctl, args...)
			cmd.Env = append(os.Environ(), "ETCD_ENDPOINTS="+strings.Join(etcd.Endpoints, ","))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("routedctl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			if strings.Contains(strings.ToLower(string(out)), "warning") {
				t.Errorf("routedctl %s warned:\n%s", strings.Join(args, " "), out)
			}
		}
	}
}

// TestManifestReferences: what the workloads refer to exists and fits:
// ConfigMap keys, Secrets, ServiceAccounts, volumes, the image, and the
// settings the DaemonSet must have.
func TestManifestReferences(t *testing.T) {
	objs := append(readDocs(t, deployPath("routed.yaml")), readDocs(t, deployPath("rr-mode.yaml"))...)
	cm := find(t, objs, "ConfigMap", "routed-config")
	data := asMap(cm["data"])
	have := map[string]bool{}
	for _, o := range objs {
		have[o.kind()+"/"+o.name()] = true
	}
	images := map[string]bool{}
	for _, o := range objs {
		spec := podSpec(o)
		if spec == nil {
			continue
		}
		if sa := str(spec["serviceAccountName"]); !have["ServiceAccount/"+sa] {
			t.Errorf("%s: serviceAccountName %q is not defined", o.id(), sa)
		}
		volumes := map[string]bool{}
		secretOf := map[string]string{}
		for _, v := range list(spec["volumes"]) {
			vm := asMap(v)
			volumes[str(vm["name"])] = true
			secretOf[str(vm["name"])] = str(asMap(vm["secret"])["secretName"])
			if s := str(asMap(vm["secret"])["secretName"]); s != "" && !have["Secret/"+s] {
				t.Errorf("%s: volume %s: Secret %q is not defined", o.id(), vm["name"], s)
			}
		}
		for _, c := range containers(spec) {
			images[str(c["image"])] = true
			for _, e := range list(c["env"]) {
				ref := asMap(asMap(asMap(e)["valueFrom"])["configMapKeyRef"])
				if ref == nil {
					continue
				}
				if str(ref["name"]) != "routed-config" {
					t.Errorf("%s: env %v: ConfigMap %q, want routed-config", o.id(), asMap(e)["name"], ref["name"])
				} else if _, ok := data[str(ref["key"])]; !ok {
					t.Errorf("%s: env %v: routed-config has no key %q", o.id(), asMap(e)["name"], ref["key"])
				}
			}
			for _, m := range list(c["volumeMounts"]) {
				if n := str(asMap(m)["name"]); !volumes[n] {
					t.Errorf("%s: container %s mounts undefined volume %q", o.id(), c["name"], n)
				}
				// One etcd identity per component (docs/etcd-rbac.md).
				if str(asMap(m)["mountPath"]) == "/etc/routed/etcd-secrets" {
					want := map[string]string{"routed-node/routed": "routed-etcd-secrets", "routed-node/install-cni": "routed-cni-etcd-secrets", "routed-route-reflector/routed": "routed-rr-etcd-secrets", "routed-controllers/controllers": "routed-controllers-etcd-secrets", "routed-cluster-gc/cluster-gc": "routed-cluster-gc-etcd-secrets"}[o.name()+"/"+str(c["name"])]
					if got := secretOf[str(asMap(m)["name"])]; got != want {
						t.Errorf("%s: container %s takes its etcd identity from Secret %q, want %q", o.id(), c["name"], got, want)
					}
				}
			}
		}
	}
	if len(images) != 1 {
		t.Errorf("one image for every container, got %v", sortedKeys(images))
	}

	ds := find(t, objs, "DaemonSet", "routed-node")
	spec := podSpec(ds)
	if spec["automountServiceAccountToken"] != false {
		t.Errorf("routed-node: automountServiceAccountToken %v, want false (install-cni makes no API call)", spec["automountServiceAccountToken"])
	}
	// Only routed, which requests the CNI plugin's token, holds the
	// pod's; the plugin's comes from the TokenRequest API, never from a
	// long-lived token Secret.
	for _, c := range containers(spec) {
		for _, m := range list(c["volumeMounts"]) {
			if str(asMap(m)["name"]) == "routed-node-token" && c["name"] != "routed" {
				t.Errorf("routed-node: container %s mounts the pod's service account token", c["name"])
			}
		}
	}
	for _, o := range objs {
		if o.kind() == "Secret" && str(o["type"]) == "kubernetes.io/service-account-token" {
			t.Errorf("%s: a never-expiring legacy token Secret; routed requests the CNI plugin's token (TokenRequest)", o.id())
		}
	}
	if spec["hostNetwork"] != true || spec["priorityClassName"] != "system-node-critical" {
		t.Errorf("routed-node: hostNetwork %v, priorityClassName %v", spec["hostNetwork"], spec["priorityClassName"])
	}
	if tol := list(spec["tolerations"]); len(tol) != 1 || !reflect.DeepEqual(tol[0], map[string]any{"operator": "Exists"}) {
		t.Errorf("routed-node tolerations %v, want [{operator: Exists}]", tol)
	}
	var sawInstall, sawRouted bool
	for _, c := range containers(spec) {
		cmd := list(c["command"])
		switch str(c["name"]) {
		case "install-cni":
			sawInstall = len(cmd) == 2 && cmd[1] == "install" && strings.HasSuffix(str(cmd[0]), "/routed-cni")
		case "routed":
			sawRouted = true
			// Health listens on loopback; the probes exec routed health.
			for p, flag := range map[string]string{"livenessProbe": "--liveness", "readinessProbe": "--readiness"} {
				if cmd := list(asMap(asMap(c[p])["exec"])["command"]); len(cmd) != 3 || cmd[1] != "health" || cmd[2] != flag {
					t.Errorf("routed %s exec %v, want [routed health %s]", p, cmd, flag)
				}
			}
			for _, e := range list(c["env"]) {
				if m := asMap(e); m["name"] == "ROUTED_HEALTH_LISTEN" && m["value"] != "127.0.0.1:9099" {
					t.Errorf("ROUTED_HEALTH_LISTEN %v, want 127.0.0.1:9099", m["value"])
				}
			}
			if asMap(c["securityContext"])["privileged"] != true {
				t.Errorf("routed must be privileged (sysctls under /proc/sys/net)")
			}
		}
	}
	if !sawInstall || !sawRouted {
		t.Errorf("routed-node: install-cni init container running `routed-cni install` %v, routed container %v", sawInstall, sawRouted)
	}

	rr := find(t, objs, "Deployment", "routed-route-reflector")
	rrSpec := podSpec(rr)
	anti := list(asMap(asMap(rrSpec["affinity"])["podAntiAffinity"])["requiredDuringSchedulingIgnoredDuringExecution"])
	if rr.get("spec", "replicas") != float64(2) || rrSpec["hostNetwork"] != true || len(anti) != 1 ||
		asMap(anti[0])["topologyKey"] != "kubernetes.io/hostname" {
		t.Errorf("routed-route-reflector: want 2 replicas, hostNetwork, required anti-affinity across kubernetes.io/hostname")
	}
	if c := containers(rrSpec); len(c) != 1 || !reflect.DeepEqual(c[0]["args"], []any{"--role", "route-reflector"}) {
		t.Errorf("routed-route-reflector must run routed --role route-reflector")
	}
	// The reflectors' hosts and routed-node's exclude each other.
	dsAff := asMap(asMap(asMap(spec["affinity"])["nodeAffinity"])["requiredDuringSchedulingIgnoredDuringExecution"])
	if !strings.Contains(fmt.Sprint(dsAff), "routed.io/route-reflector-host") ||
		asMap(rrSpec["nodeSelector"])["routed.io/route-reflector-host"] != "true" {
		t.Errorf("routed-node must avoid, and the reflectors require, hosts labelled routed.io/route-reflector-host=true")
	}

	// Least privilege, as written (TestCNIPodSource checks it against
	// the API server).
	cni := find(t, objs, "ClusterRole", "routed-cni-plugin")
	wantRules := []any{map[string]any{"apiGroups": []any{""}, "resources": []any{"pods", "namespaces"}, "verbs": []any{"get"}}}
	if !reflect.DeepEqual(cni["rules"], wantRules) {
		t.Errorf("ClusterRole routed-cni-plugin rules %v, want get on pods and namespaces only", cni["rules"])
	}
	// The one write: routed-node creates tokens for routed-cni-plugin
	// and no other account (TestCNIToken checks it against the server);
	// and it reads its own DaemonSet, to tell an uninstall from a restart.
	tokenRule := map[string]any{"apiGroups": []any{""}, "resources": []any{"serviceaccounts/token"},
		"resourceNames": []any{"routed-cni-plugin"}, "verbs": []any{"create"}}
	dsRule := map[string]any{"apiGroups": []any{"apps"}, "resources": []any{"daemonsets"},
		"resourceNames": []any{"routed-node"}, "verbs": []any{"get", "list", "watch"}}
	if r := find(t, objs, "Role", "routed-node-cni-token"); r.namespace() != "kube-system" || !reflect.DeepEqual(r["rules"], []any{tokenRule, dsRule}) {
		t.Errorf("Role routed-node-cni-token in %q, rules %v, want in kube-system %v and %v only", r.namespace(), r["rules"], tokenRule, dsRule)
	}
	// The controllers read the kinds they convert (nodes for automatic
	// host endpoints, EndpointSlices for Service rules), record Events and
	// hold their one Lease; nothing more.
	eventRule := map[string]any{"apiGroups": []any{""}, "resources": []any{"events"}, "verbs": []any{"create", "patch"}}
	ctlRules := []any{
		map[string]any{"apiGroups": []any{""}, "resources": []any{"namespaces", "serviceaccounts", "pods", "nodes"}, "verbs": []any{"list", "watch"}},
		map[string]any{"apiGroups": []any{"networking.k8s.io"}, "resources": []any{"networkpolicies"}, "verbs": []any{"list", "watch"}},
		map[string]any{"apiGroups": []any{"policy.networking.k8s.io"}, "resources": []any{"clusternetworkpolicies"}, "verbs": []any{"list", "watch"}},
		map[string]any{"apiGroups": []any{"discovery.k8s.io"}, "resources": []any{"endpointslices"}, "verbs": []any{"list", "watch"}},
		eventRule}
	if r := find(t, objs, "ClusterRole", "routed-controllers"); !reflect.DeepEqual(r["rules"], ctlRules) {
		t.Errorf("ClusterRole routed-controllers rules %v, want %v", r["rules"], ctlRules)
	}
	// routed-node keeps its Node's NetworkUnavailable condition False
	// (routed/nodecond): patch on nodes/status, nothing more.
	nodeStatusRule := map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes/status"}, "verbs": []any{"patch"}}
	if r := find(t, objs, "ClusterRole", "routed-node"); !slices.ContainsFunc(list(r["rules"]), func(x any) bool { return reflect.DeepEqual(x, nodeStatusRule) }) {
		t.Errorf("ClusterRole routed-node rules %v, want %v among them", r["rules"], nodeStatusRule)
	}
	leaseCreate := map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "verbs": []any{"create"}}
	leaseUpdate := map[string]any{"apiGroups": []any{"coordination.k8s.io"}, "resources": []any{"leases"}, "resourceNames": []any{"routed-controllers"}, "verbs": []any{"get", "update"}}
	if r := find(t, objs, "Role", "routed-controllers-leader"); r.namespace() != "kube-system" || !reflect.DeepEqual(r["rules"], []any{leaseCreate, leaseUpdate}) {
		t.Errorf("Role routed-controllers-leader in %q, rules %v, want in kube-system %v and %v only", r.namespace(), r["rules"], leaseCreate, leaseUpdate)
	}
	for _, o := range objs {
		if o.kind() != "ClusterRole" && o.kind() != "Role" {
			continue
		}
		for _, r := range list(o["rules"]) {
			if reflect.DeepEqual(r, tokenRule) || reflect.DeepEqual(r, eventRule) || reflect.DeepEqual(r, leaseCreate) || reflect.DeepEqual(r, leaseUpdate) ||
				(o.id() == "rbac.authorization.k8s.io/v1 ClusterRole//routed-node" && reflect.DeepEqual(r, nodeStatusRule)) {
				continue
			}
			for _, v := range list(asMap(r)["verbs"]) {
				if v != "get" && v != "list" && v != "watch" {
					t.Errorf("%s grants %v: routed only reads the API, but for the CNI plugin's token, the controllers' events and Lease and routed-node's NetworkUnavailable condition", o.id(), v)
				}
			}
			for _, res := range list(asMap(r)["resources"]) {
				if res == "secrets" || res == "*" {
					t.Errorf("%s grants %v", o.id(), res)
				}
			}
		}
	}
}

// TestCNIConfigTemplate: the ConfigMap's conflist template is the
// installer's built-in one (same JSON once filled in).
func TestCNIConfigTemplate(t *testing.T) {
	cm := find(t, readDocs(t, deployPath("routed.yaml")), "ConfigMap", "routed-config")
	tmpl := str(asMap(cm["data"])["cni_network_config"])
	fill := func(s string) any {
		r := strings.NewReplacer("__CNI_MTU__", "0", "__LOG_LEVEL__", "info")
		var v any
		if err := json.Unmarshal([]byte(r.Replace(s)), &v); err != nil {
			t.Fatalf("template is not JSON once filled: %v\n%s", err, s)
		}
		return v
	}
	if !reflect.DeepEqual(fill(tmpl), fill(install.DefaultTemplate)) {
		t.Errorf("routed-config cni_network_config differs from the installer's DefaultTemplate:\n%s", tmpl)
	}
}
