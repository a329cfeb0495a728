package k8s_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// renderFlows renders deploy/base with the deploy/flows component, as
// an operator's overlay does (docs/flows.md, "Deploying").
func renderFlows(t *testing.T) (path string, objs []object) {
	t.Helper()
	dir := t.TempDir()
	k := "resources:\n- " + relPath(t, dir, deployPath("base")) + "\ncomponents:\n- " + relPath(t, dir, deployPath("flows")) + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, stderr, err := kubectl(t, nil, "kustomize", dir)
	if err != nil {
		t.Fatalf("kubectl kustomize (deploy/base + deploy/flows): %v\n%s", err, stderr)
	}
	path = filepath.Join(t.TempDir(), "base-with-flows.yaml")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, parseDocs(t, []byte(out), "base with flows")
}

// relPath is target relative to dir, as kustomize wants its paths.
func relPath(t *testing.T, dir, target string) string {
	t.Helper()
	r, err := filepath.Rel(dir, target)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// envOf maps a container's plain env values by name.
func envOf(c map[string]any) map[string]string {
	m := map[string]string{}
	for _, e := range list(c["env"]) {
		m[str(asMap(e)["name"])] = str(asMap(e)["value"])
	}
	return m
}

// mountOf returns the volume mounted at a path that holds file, if any.
func mountOf(c map[string]any, file string) string {
	for _, m := range list(c["volumeMounts"]) {
		if p := str(asMap(m)["mountPath"]); strings.HasPrefix(file, strings.TrimSuffix(p, "/")+"/") {
			return str(asMap(m)["name"])
		}
	}
	return ""
}

// TestFlowsManifestReferences: the deploy/flows component on the base:
// the aggregator runs routed-controllers flows-aggregator from the one
// image, with no API token, no Role, no host network, non-root, its
// files in the Secrets deploy/flows/secrets.sh creates; its Service is
// ClusterIP only; routed-node gets the four flows settings, its file in
// the hostPath log directory and the aggregator's CA from the ConfigMap
// secrets.sh creates. Without the component, flows are off.
func TestFlowsManifestReferences(t *testing.T) {
	_, objs := renderFlows(t)
	baseObjs := readDocs(t, deployPath("routed.yaml"))
	script := readFile(t, deployPath("flows/secrets.sh"))

	agg := find(t, objs, "Deployment", "routed-flows-aggregator")
	spec := podSpec(agg)
	if agg.namespace() != "kube-system" || agg.get("spec", "replicas") != float64(1) {
		t.Errorf("routed-flows-aggregator: namespace %q, replicas %v; want kube-system, 1 (the window is in its memory)", agg.namespace(), agg.get("spec", "replicas"))
	}
	if spec["automountServiceAccountToken"] != false || spec["hostNetwork"] == true {
		t.Errorf("routed-flows-aggregator: automountServiceAccountToken %v, hostNetwork %v; want false, not set", spec["automountServiceAccountToken"], spec["hostNetwork"])
	}
	sa := find(t, objs, "ServiceAccount", str(spec["serviceAccountName"]))
	if sa["automountServiceAccountToken"] != false {
		t.Errorf("%s: automountServiceAccountToken %v, want false", sa.id(), sa["automountServiceAccountToken"])
	}
	for _, o := range objs {
		if (o.kind() == "RoleBinding" || o.kind() == "ClusterRoleBinding") && strings.Contains(fmt.Sprint(o["subjects"]), "name:"+sa.name()+" ") {
			t.Errorf("%s binds %s: the aggregator reads no Kubernetes API", o.id(), sa.name())
		}
	}
	ctrs := containers(spec)
	if len(ctrs) != 1 {
		t.Fatalf("routed-flows-aggregator: %d containers, want 1", len(ctrs))
	}
	c := ctrs[0]
	baseImage := str(containers(podSpec(find(t, baseObjs, "Deployment", "routed-controllers")))[0]["image"])
	if cmd := list(c["command"]); len(cmd) != 2 || !strings.HasSuffix(str(cmd[0]), "/routed-controllers") || cmd[1] != "flows-aggregator" || str(c["image"]) != baseImage {
		t.Errorf("routed-flows-aggregator runs %v from %v, want routed-controllers flows-aggregator from %s", cmd, c["image"], baseImage)
	}
	sc := asMap(c["securityContext"])
	if sc["runAsNonRoot"] != true || sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false ||
		!reflect.DeepEqual(asMap(sc["capabilities"])["drop"], []any{"ALL"}) {
		t.Errorf("routed-flows-aggregator securityContext %v: want non-root, read-only root, no escalation, every capability dropped", sc)
	}
	secretOf := map[string]string{}
	for _, v := range list(spec["volumes"]) {
		secretOf[str(asMap(v)["name"])] = str(asMap(asMap(v)["secret"])["secretName"])
	}
	env := envOf(c)
	for name, secret := range map[string]string{"FLOWS_CERT_FILE": "routed-flows-tls", "FLOWS_KEY_FILE": "routed-flows-tls",
		"FLOWS_CLIENT_CA_FILE": "routed-flows-tls", "FLOWS_TOKEN_FILE": "routed-flows-token"} {
		file := env[name]
		if got := secretOf[mountOf(c, file)]; got != secret {
			t.Errorf("routed-flows-aggregator %s=%q is in Secret %q, want %q", name, file, got, secret)
		}
		key := filepath.Base(file)
		if !strings.Contains(script, "secret generic "+secret) || !strings.Contains(script, "--from-file="+key+"=") {
			t.Errorf("deploy/flows/secrets.sh does not create Secret %s with key %s (%s)", secret, key, name)
		}
	}

	svc := find(t, objs, "Service", "routed-flows")
	ports := list(svc.get("spec", "ports"))
	if svc.get("spec", "type") != "ClusterIP" || len(ports) != 1 || asMap(ports[0])["port"] != float64(9443) || asMap(ports[0])["nodePort"] != nil {
		t.Errorf("Service routed-flows: type %v, ports %v; want ClusterIP only, port 9443, no node port", svc.get("spec", "type"), ports)
	}
	if !reflect.DeepEqual(svc.get("spec", "selector"), agg.get("spec", "selector", "matchLabels")) {
		t.Errorf("Service routed-flows selects %v, the aggregator's pods are %v", svc.get("spec", "selector"), agg.get("spec", "selector", "matchLabels"))
	}
	for _, o := range objs {
		if o.kind() == "Service" && o.get("spec", "type") != "ClusterIP" {
			t.Errorf("%s: type %v; nothing of flows on a node port or load balancer", o.id(), o.get("spec", "type"))
		}
	}

	ds := podSpec(find(t, objs, "DaemonSet", "routed-node"))
	var routed map[string]any
	for _, c := range containers(ds) {
		if c["name"] == "routed" {
			routed = c
		}
	}
	env = envOf(routed)
	if g := env["ROUTED_FLOWS_GROUP"]; g == "" || g == "0" || g == "100" {
		t.Errorf("routed-node ROUTED_FLOWS_GROUP %q: want a group of its own (not 0, not the policy log's 100)", g)
	}
	if env["ROUTED_FLOWS_AGGREGATOR"] != "https://routed-flows.kube-system.svc:9443" {
		t.Errorf("routed-node ROUTED_FLOWS_AGGREGATOR %q, want the Service's name", env["ROUTED_FLOWS_AGGREGATOR"])
	}
	hostPathOf := map[string]string{}
	cmOf := map[string]string{}
	for _, v := range list(ds["volumes"]) {
		hostPathOf[str(asMap(v)["name"])] = str(asMap(asMap(v)["hostPath"])["path"])
		cmOf[str(asMap(v)["name"])] = str(asMap(asMap(v)["configMap"])["name"])
	}
	if f := env["ROUTED_FLOWS_FILE"]; hostPathOf[mountOf(routed, f)] == "" {
		t.Errorf("routed-node ROUTED_FLOWS_FILE %q is not on a hostPath volume", f)
	}
	if f := env["ROUTED_FLOWS_AGGREGATOR_CA_FILE"]; cmOf[mountOf(routed, f)] != "routed-flows-ca" || !strings.Contains(script, "configmap routed-flows-ca --from-file="+filepath.Base(f)+"=") {
		t.Errorf("routed-node ROUTED_FLOWS_AGGREGATOR_CA_FILE %q: want key %s of ConfigMap routed-flows-ca, as secrets.sh creates it", f, filepath.Base(f))
	}
	for _, c := range containers(podSpec(find(t, baseObjs, "DaemonSet", "routed-node"))) {
		for name := range envOf(c) {
			if strings.HasPrefix(name, "ROUTED_FLOWS") {
				t.Errorf("deploy/base sets %s in %s: flows are off unless the deploy/flows component is added", name, c["name"])
			}
		}
	}
}

// TestFlowsManifestServerDryRun: the base with the flows component
// passes the real API server's strict validation, with no warnings.
func TestFlowsManifestServerDryRun(t *testing.T) {
	srv := cluster(t)
	path, objs := renderFlows(t)
	stdout, stderr, err := kubectl(t, srv, "apply", "--dry-run=server", "--validate=strict", "-f", path)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server --validate=strict (deploy/base + deploy/flows): %v\n%s%s", err, stdout, stderr)
	}
	if w := warnings(stderr); w != "" {
		t.Errorf("the API server warned:\n%s", w)
	}
	if n := strings.Count(stdout, "(server dry run)"); n != len(objs) {
		t.Errorf("%d objects accepted, the rendering has %d:\n%s", n, len(objs), stdout)
	}
}
