package k8s_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/routed/migrate"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/testbin"
)

// TestMigrateCalicoKDD: `routedctl migrate calico --from-kubeconfig`
// against a real kube-apiserver holding Calico's CRDs and a Calico
// cluster written as Calico writes it, into a real etcd:
//   - plan: lists every resource, block and endpoint it will write and
//     everything it will not, each with what is lost, and writes nothing;
//   - apply: writes it; pods keep their addresses under their handles,
//     Calico's device names, labels, profiles, service account and named
//     ports; `routedctl ipam check` is clean;
//   - again: a second run is a no-op;
//   - interrupted: a run cancelled after three writes resumes;
//   - least privilege: the documented Job's ClusterRole is enough;
//   - policy loss: a policy routed cannot carry (its tier exists
//     nowhere) refuses the run, nothing written, until
//     --accept-policy-loss;
//   - conflict: routed state that differs is refused, nothing written.
func TestMigrateCalicoKDD(t *testing.T) {
	srv, rc := calicoKDDCluster(t, false)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, srv.Kubeconfig(srv.URL, srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	store := dstest.Client(t)
	ep := store.Endpoints()[0]
	planLine := regexp.MustCompile(`(Plan|Migrated): (\d+) to create, 0 to update, (\d+) unchanged, 0 conflicts, (\d+) not carried over`)

	var planned string
	t.Run("plan", func(t *testing.T) {
		out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig, "--dry-run")
		if code != 0 {
			t.Fatalf("dry run: code %d\n%s%s", code, out, errOut)
		}
		t.Logf("plan:\n%s%s", out, errOut)
		m := planLine.FindStringSubmatch(out)
		if m == nil || m[1] != "Plan" || m[3] != "0" {
			t.Fatalf("no plan summary:\n%s", out)
		}
		planned = m[2]
		for _, want := range []string{
			"IPPool                 default-ipv4-ippool",
			"BGPFilter              pods-only",
			"Node                   node-a",
			"Node                   node-b",
			"Tier                   security",
			"Tier default create",
			"GlobalNetworkPolicy    security.deny-db-from-web",
			"NetworkPolicy shop.allow-web",
			"NetworkSet shop.partners",
			"Profile                kns.shop",
			"Profile                ksa.shop.frontend",
			"IPAMConfiguration      default",
			"WorkloadEndpoint       node--a-k8s-shop-web--1-eth0",
			"WorkloadEndpoint       node--b-k8s-default-db--1-eth0",
			"IPAMBlock              10.244.1.0/26 (node-a)",
			"IPAMBlock              10.244.2.64/26 (node-b)",
			// What is not carried, each with what is lost.
			"HostEndpoint           node-a-eth0",
			"IPReservation          keep-out",
			"Not carried over: 1 clusterinformations (default)",
			"Not carried over: networkpolicies.crd.projectcalico.org shop/knp.default.legacy: converted by Calico from a Kubernetes policy",
			// Narrowed, not lost: its Allow rule matching HTTP goes, the
			// web pods keep its ingress default deny.
			"Narrowed: GlobalNetworkPolicy http-gets: spec.ingress[0] (Allow with an HTTP match) dropped",
			"GlobalNetworkPolicy    http-gets",
			"Not carried over: block 10.244.3.0/26 (0 addresses in use): no confirmed affinity to a node",
			"Not carried over: Node node-c: calico-node left no address on it",
			"Not carried over: pod default/other-cni on node-b: its address 10.99.0.5 is not allocated in a carried Calico block",
			"Note: 1 Kubernetes NetworkPolicies stay in Kubernetes: routed-controllers convert them",
		} {
			if !containsSpaced(out, want) {
				t.Errorf("plan lacks %q", want)
			}
		}
		for _, never := range []string{"hostnet", "default/pending", "default/done"} {
			if strings.Contains(out, never) {
				t.Errorf("plan mentions %s, for which Calico has no endpoint:\n%s", never, out)
			}
		}
		// Calico's WireGuard device address is carried with its handle
		// (routed gives nodes WireGuard device addresses as Calico does).
		if strings.Contains(out, "wireguard-tunnel-addr-node-b") || strings.Contains(errOut, "IPAMHandle wireguard-tunnel-addr-node-b") {
			t.Errorf("the plan leaves the WireGuard device address behind:\n%s%s", out, errOut)
		}
		if _, _, code := migrateCtl(t, ep, nil, "get", "ippool", "default-ipv4-ippool"); code == 0 {
			t.Fatal("the dry run wrote the pool")
		}
		// Outside a pod, a source must be named; only one.
		for _, args := range [][]string{{}, {"--from-etcd", ep, "--from-kubeconfig", kubeconfig}} {
			out, errOut, code := migrateCtl(t, ep, []string{"KUBERNETES_SERVICE_HOST="}, append([]string{"migrate", "calico", "--dry-run"}, args...)...)
			if code == 0 || !strings.Contains(errOut, "--from-kubeconfig") {
				t.Errorf("migrate calico %v: code %d\n%s%s", args, code, out, errOut)
			}
		}
	})

	t.Run("apply", func(t *testing.T) {
		out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
		if m := planLine.FindStringSubmatch(out); code != 0 || m == nil || m[1] != "Migrated" || m[2] != planned {
			t.Fatalf("migrate: code %d, want %s created\n%s%s", code, planned, out, errOut)
		}
		out, errOut, code = migrateCtl(t, ep, nil, "ipam", "check")
		if code != 0 || !strings.Contains(out, "No IPAM problems found") {
			t.Fatalf("ipam check: code %d\n%s%s", code, out, errOut)
		}
		for ip, handle := range map[string]string{"10.244.1.1": "k8s-pod-network." + webCID, "10.244.2.65": "k8s-pod-network." + dbCID, "10.244.2.64": "ipip-tunnel-addr-node-b"} {
			if out, _, _ := migrateCtl(t, ep, nil, "ipam", "show", "--ip", ip); !strings.Contains(out, handle) {
				t.Errorf("%s not held by %s:\n%s", ip, handle, out)
			}
		}
		if out, _, _ := migrateCtl(t, ep, nil, "ipam", "show", "--ip", "10.244.2.66"); !strings.Contains(out, "wireguard-tunnel-addr-node-b") || !strings.Contains(out, "tunnel") {
			t.Errorf("the WireGuard device address was not carried with its handle:\n%s", out)
		}
		ctx := context.Background()
		r, err := store.Get(ctx, api.KindWorkloadEndpoint, "node--a-k8s-shop-web--1-eth0")
		if err != nil {
			t.Fatal(err)
		}
		w := r.(*api.WorkloadEndpoint)
		s := w.Spec
		if s.InterfaceName != calicoVeth("shop", "web-1") || s.ContainerID != webCID || s.Handle != "k8s-pod-network."+webCID ||
			strings.Join(s.IPNetworks, ",") != "10.244.1.1/32" || s.ServiceAccountName != "frontend" ||
			strings.Join(s.Profiles, ",") != "kns.shop,ksa.shop.frontend" || len(s.Ports) != 1 || s.Ports[0].Name != "http" || s.Ports[0].Port != 8080 {
			t.Errorf("web-1's endpoint: %+v", s)
		}
		if l := w.Metadata.Labels; l["app"] != "web" || l[api.LabelNamespace] != "shop" || l[api.LabelServiceAccount] != "frontend" || l[api.LabelOrchestrator] != "k8s" {
			t.Errorf("web-1's labels: %v", l)
		}
		r, err = store.Get(ctx, api.KindNode, "node-b")
		if err != nil {
			t.Fatal(err)
		}
		if n := r.(*api.Node); n.Spec.BGP == nil || n.Spec.BGP.IPv4Address != "10.0.0.12/24" || n.Spec.BGP.IPv4IPIPTunnelAddr != "10.244.2.64" || n.Spec.BGP.ASNumber != 64513 || n.Metadata.Labels["rack"] != "rack-1" {
			t.Errorf("node-b: %+v %+v", n.Spec.BGP, n.Metadata.Labels)
		}
		r, err = store.Get(ctx, api.KindProfile, "kns.shop")
		if err != nil {
			t.Fatal(err)
		}
		if p := r.(*api.Profile); p.Spec.LabelsToApply["pcns.team"] != "shop" {
			t.Errorf("kns.shop: %+v", p.Spec)
		}
	})

	t.Run("again", func(t *testing.T) {
		out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
		if m := planLine.FindStringSubmatch(out); code != 0 || m == nil || m[2] != "0" || m[3] != planned {
			t.Fatalf("second run is not a no-op (want %s unchanged): code %d\n%s%s", planned, code, out, errOut)
		}
	})

	t.Run("interrupted", func(t *testing.T) {
		// A run stopped at every step resumes: before the first write
		// (when the plan, with what is not carried, has been shown and
		// nothing is written yet), after each resource, and after the
		// last resource, before the blocks.
		to := dstest.Client(t)
		// Three reads of the cluster a stop point: unthrottled (client-go
		// allows 5 requests a second by default).
		rc := rest.CopyConfig(rc)
		rc.QPS, rc.Burst = 1000, 1000
		plan, err := migrate.CalicoKube(context.Background(), rc, to, migrate.Options{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		total := count(plan, "create")
		if total != len(plan.Items) || total < 20 {
			t.Fatalf("plan into an empty routed: %d to create of %d", total, len(plan.Items))
		}
		for stop := 0; stop <= total; stop++ {
			if _, err := to.Etcd().Delete(context.Background(), "\x00", clientv3.WithFromKey()); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			written, shownEmpty := 0, false
			_, err := migrate.CalicoKube(ctx, rc, to, migrate.Options{
				Planned: func(rep *migrate.Report) {
					// What is not carried is known, and shown, before
					// anything is written.
					keys, err := to.Etcd().Get(context.Background(), "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
					shownEmpty = err == nil && keys.Count == 0 && slices.ContainsFunc(rep.Skipped, func(s string) bool { return strings.Contains(s, "clusterinformations") })
					if stop == 0 {
						cancel()
					}
				},
				Progress: func(migrate.Item) {
					if written++; written == stop {
						cancel()
					}
				}})
			cancel()
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("run stopped after %d writes: %v", stop, err)
			}
			if !shownEmpty {
				t.Fatalf("run stopped after %d writes: the plan was not handed over, with what is not carried, before the first write", stop)
			}
			// The resumed run finds the resources written before the stop
			// unchanged, and writes the rest and every block.
			rep, err := migrate.CalicoKube(context.Background(), rc, to, migrate.Options{})
			if err != nil {
				t.Fatalf("resuming after %d writes: %v", stop, err)
			}
			if c, u := count(rep, "create"), count(rep, "unchanged"); u != stop || c+u != len(rep.Items) {
				t.Fatalf("resumed after %d writes: %d created, %d unchanged of %d", stop, c, u, len(rep.Items))
			}
			for _, b := range rep.Blocks {
				if b.Action != "create" {
					t.Fatalf("resumed after %d writes: block %s %s, want written by the resumed run (the blocks come after every resource)", stop, b.CIDR, b.Action)
				}
			}
			out, errOut, code := migrateCtl(t, to.Endpoints()[0], nil, "ipam", "check")
			if code != 0 || !strings.Contains(out, "No IPAM problems found") {
				t.Fatalf("ipam check after resuming from %d writes: code %d\n%s%s", stop, code, out, errOut)
			}
			again, err := migrate.CalicoKube(context.Background(), rc, to, migrate.Options{})
			if err != nil || count(again, "create") != 0 || count(again, "unchanged") != total {
				t.Fatalf("a run after the one resumed from %d writes is not a no-op: %v", stop, err)
			}
			for _, b := range again.Blocks {
				if b.Action != "unchanged" {
					t.Fatalf("a run after the one resumed from %d writes: block %s %s", stop, b.CIDR, b.Action)
				}
			}
		}
		t.Logf("stopped and resumed at each of %d points: before the first write and after each of %d resources", total+1, total)
	})

	t.Run("routed's tiers first", func(t *testing.T) {
		// routed-controllers (or routed) ran first and made the tiers
		// routed always has: Calico's are the same, no conflict.
		to := dstest.Client(t)
		if err := to.EnsureDefaultTiers(context.Background()); err != nil {
			t.Fatal(err)
		}
		plan, err := migrate.CalicoKube(context.Background(), rc, to, migrate.Options{DryRun: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range plan.Items {
			if it.Kind == api.KindTier && it.Name != "security" && it.Action != "unchanged" {
				t.Errorf("tier %s: %s %s", it.Name, it.Action, it.Detail)
			}
		}
		if n := count(plan, "unchanged"); n != 3 {
			t.Errorf("%d unchanged, want routed's 3 tiers", n)
		}
	})

	t.Run("least privilege", func(t *testing.T) {
		// The documented Job, its ServiceAccount and read-only ClusterRole,
		// as the API server validates them, reading all the run reads:
		// calico-node's DaemonSet (its environment) and, as Calico 3.29's
		// manifests install them, the admin network policy kinds (a list
		// refused stops the run).
		kubectlCreate(t, srv, calicoNodeDaemonSet+"---\n"+adminPolicyCRDs)
		if out, errOut, err := kubectl(t, srv, "wait", "--for=condition=Established", "--timeout=90s", "crd", "adminnetworkpolicies.policy.networking.k8s.io", "baselineadminnetworkpolicies.policy.networking.k8s.io"); err != nil {
			t.Fatalf("admin network policy CRDs: %v\n%s%s", err, out, errOut)
		}
		token, dir, kc := migrateJobKubeconfig(t, srv)
		fresh := dstest.Client(t).Endpoints()[0]
		// The Job's service account is one more profile to create.
		n, _ := strconv.Atoi(planned)
		want := strconv.Itoa(n + 1)
		out, errOut, code := migrateCtl(t, fresh, nil, "migrate", "calico", "--from-kubeconfig", kc, "--dry-run")
		if m := planLine.FindStringSubmatch(out); code != 0 || m == nil || m[2] != want || !containsSpaced(out, "Profile ksa.kube-system.routed-migrate create") {
			t.Fatalf("with the Job's service account: code %d, want %s to create\n%s%s", code, want, out, errOut)
		}
		if strings.Contains(errOut, "calico-node's environment") {
			t.Fatalf("with the Job's service account calico-node's environment was not read:\n%s", errOut)
		}

		// In a pod: no flag, the service account's files where the
		// kubelet mounts them (in a mount namespace of this command's
		// own, over a private /run).
		requireRoot(t)
		if err := os.WriteFile(filepath.Join(dir, "token"), []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "ca.crt"), srv.CAPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		sa := "/run/secrets/kubernetes.io/serviceaccount"
		script := `mount -t tmpfs routed-test /run && mkdir -p ` + sa + ` && cp "$DIR/token" "$DIR/ca.crt" ` + sa + `/ && exec "$CTL" migrate calico --dry-run`
		out, errOut, code = migrateCtl(t, fresh, []string{"DIR=" + dir, "CTL=" + testbin.Path(t, "routedctl"), "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=" + strconv.Itoa(srv.Port)},
			"@unshare", "--mount", "--propagation", "private", "sh", "-c", script)
		if m := planLine.FindStringSubmatch(out); code != 0 || m == nil || m[2] != want {
			t.Fatalf("in-cluster: code %d, want %s to create\n%s%s", code, want, out, errOut)
		}
	})

	t.Run("switch overlay", func(t *testing.T) {
		// The documented overlay renders deploy/base with routed-node
		// only on labelled nodes, and the API server takes it.
		overlay := filepath.Join(repoRoot(), "docs", "migrate-calico-overlay")
		out, errOut, err := kubectl(t, nil, "kustomize", overlay)
		if err != nil || !strings.Contains(out, "nodeSelector:\n        routed.io/node: \"true\"") {
			t.Fatalf("kubectl kustomize %s: %v\n%s%s", overlay, err, out, errOut)
		}
		if out, errOut, err := kubectl(t, srv, "apply", "--dry-run=server", "-k", overlay); err != nil || !strings.Contains(out, "daemonset.apps/routed-node") {
			t.Fatalf("server dry run of %s: %v\n%s%s", overlay, err, out, errOut)
		}
	})

	t.Run("node network available", func(t *testing.T) {
		// calico-node's preStop hook marks its node's network unavailable
		// as it leaves (Kubernetes then taints the node NoSchedule);
		// the documented patch of the switch clears that, keeping the
		// node's other conditions.
		ctx := context.Background()
		kube := kubernetes.NewForConfigOrDie(rc)
		down := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"kubelet is posting ready status"},` +
			`{"type":"NetworkUnavailable","status":"True","reason":"CalicoIsDown","message":"Calico is shutting down on this node"}]}}`
		if _, err := kube.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, []byte(down), metav1.PatchOptions{}, "status"); err != nil {
			t.Fatal(err)
		}
		doc, err := os.ReadFile(filepath.Join(repoRoot(), "docs", "migrate-calico.md"))
		if err != nil {
			t.Fatal(err)
		}
		var patch string
		for _, line := range strings.Split(string(doc), "\n") {
			if l := strings.TrimSpace(line); strings.HasPrefix(l, "kubectl patch node $N --subresource=status") {
				patch = l
			}
		}
		if patch == "" {
			t.Fatal("docs/migrate-calico.md has no `kubectl patch node $N --subresource=status` line")
		}
		cmd := exec.Command("sh", "-c", patch)
		cmd.Env = append(os.Environ(), "N=node-a", "KUBECONFIG="+srv.AdminKubeconfig, "HOME="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", patch, err, out)
		}
		n, err := kube.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[corev1.NodeConditionType]corev1.ConditionStatus{}
		for _, c := range n.Status.Conditions {
			got[c.Type] = c.Status
		}
		if got[corev1.NodeNetworkUnavailable] != corev1.ConditionFalse || got[corev1.NodeReady] != corev1.ConditionTrue || len(got) != 2 {
			t.Fatalf("after the documented patch node-a's conditions are %v, want NetworkUnavailable False and Ready kept", got)
		}
	})

	t.Run("policy loss", func(t *testing.T) {
		// A policy routed cannot carry (its tier exists in neither
		// datastore: Calico's custom resources do not check) refuses the
		// run, writing nothing, until the loss is accepted.
		pol := "apiVersion: crd.projectcalico.org/v1\nkind: GlobalNetworkPolicy\nmetadata: {name: lost.deny-ssh}\nspec:\n  tier: lost\n  selector: app == 'db'\n  ingress: [{action: Deny, protocol: TCP, destination: {ports: [22]}}]\n"
		if out, errOut, err := kubectl(t, srv, "create", "-f", writeTemp(t, pol)); err != nil {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
		defer func() {
			if out, errOut, err := kubectl(t, srv, "delete", "globalnetworkpolicies.crd.projectcalico.org", "lost.deny-ssh"); err != nil {
				t.Fatalf("%v\n%s%s", err, out, errOut)
			}
		}()
		fresh := dstest.Client(t)
		out, errOut, code := migrateCtl(t, fresh.Endpoints()[0], nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
		if code == 0 || !strings.Contains(out, `POLICY LOSS: GlobalNetworkPolicy lost.deny-ssh cannot be carried (its tier "lost" is in neither datastore)`) ||
			!strings.Contains(out, "traffic its 1 Deny rule(s) denied would be allowed") || !strings.Contains(errOut, "--accept-policy-loss") {
			t.Fatalf("policy loss: code %d, want refused naming it\n%s%s", code, out, errOut)
		}
		if _, err := fresh.Get(context.Background(), api.KindIPPool, "default-ipv4-ippool"); err == nil {
			t.Fatal("a refused migration wrote the pool")
		}
		// The least-privilege Job's service account is one more profile.
		n, _ := strconv.Atoi(planned)
		want := strconv.Itoa(n + 1)
		out, errOut, code = migrateCtl(t, fresh.Endpoints()[0], nil, "migrate", "calico", "--from-kubeconfig", kubeconfig, "--accept-policy-loss")
		if m := planLine.FindStringSubmatch(out); code != 0 || m == nil || m[2] != want || !strings.Contains(errOut, "WARNING: policy lost: GlobalNetworkPolicy lost.deny-ssh") {
			t.Fatalf("accepted policy loss: code %d, want %s created and the loss warned\n%s%s", code, want, out, errOut)
		}
	})

	t.Run("conflict", func(t *testing.T) {
		if _, errOut, code := migrateCtl(t, ep, nil, "apply", "-f", writeTemp(t, "apiVersion: routed.io/v1\nkind: BGPPeer\nmetadata: {name: rack1-tor}\nspec: {peerIP: 10.0.0.2, asNumber: 64567}\n")); code != 0 {
			t.Fatal(errOut)
		}
		if out, errOut, err := kubectl(t, srv, "create", "-f", writeTemp(t, "apiVersion: crd.projectcalico.org/v1\nkind: BGPPeer\nmetadata: {name: rack2-tor}\nspec: {peerIP: 10.0.1.1, asNumber: 64568}\n")); err != nil {
			t.Fatalf("%v\n%s%s", err, out, errOut)
		}
		out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
		if code == 0 || !containsSpaced(out, "BGPPeer rack1-tor conflict") || !strings.Contains(errOut, "nothing was written") {
			t.Fatalf("conflict: code %d\n%s%s", code, out, errOut)
		}
		if _, err := store.Get(context.Background(), api.KindBGPPeer, "rack2-tor"); err == nil {
			t.Error("a refused migration wrote rack2-tor")
		}
	})
}

// count counts the report's resources (not blocks) with action.
func count(rep *migrate.Report, action string) int {
	n := 0
	for _, it := range rep.Items {
		if it.Action == action {
			n++
		}
	}
	return n
}

// containsSpaced reports whether out has want, with runs of spaces
// (a table's padding) matching any run of spaces.
func containsSpaced(out, want string) bool {
	squeeze := regexp.MustCompile(` +`)
	return strings.Contains(squeeze.ReplaceAllString(out, " "), squeeze.ReplaceAllString(want, " "))
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestMigrateCalicoKDDv3: a Calico that keeps its resources as
// projectcalico.org/v3 custom resources (its CRDs and the same cluster
// as TestMigrateCalicoKDD's) is read the same way: the same plan, ipam
// check clean after the migration, a second run a no-op.
func TestMigrateCalicoKDDv3(t *testing.T) {
	srv, _ := calicoKDDCluster(t, true)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, srv.Kubeconfig(srv.URL, srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	ep := dstest.Client(t).Endpoints()[0]
	out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig)
	t.Logf("migration:\n%s%s", out, errOut)
	for _, want := range []string{
		"Migrated: 30 to create, 0 to update, 0 unchanged, 0 conflicts, 5 not carried over, 1 narrowed",
		"WorkloadEndpoint node--a-k8s-shop-web--1-eth0 create",
		"IPAMConfiguration default create",
		"Not carried over: networkpolicies.projectcalico.org shop/knp.default.legacy",
		"Not carried over: block 10.244.3.0/26 (0 addresses in use): no confirmed affinity to a node",
	} {
		if code != 0 || !containsSpaced(out, want) {
			t.Errorf("migration lacks %q (code %d)", want, code)
		}
	}
	if out, errOut, code := migrateCtl(t, ep, nil, "ipam", "check"); code != 0 || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check: code %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", kubeconfig); code != 0 || !strings.Contains(out, "Migrated: 0 to create, 0 to update, 30 unchanged") {
		t.Fatalf("second run: code %d\n%s%s", code, out, errOut)
	}
	// The documented Job's service account reads projectcalico.org/v3
	// too: its own profile is the one more to create.
	_, _, jobKC := migrateJobKubeconfig(t, srv)
	out, errOut, code = migrateCtl(t, ep, nil, "migrate", "calico", "--from-kubeconfig", jobKC, "--dry-run")
	if code != 0 || !containsSpaced(out, "Plan: 1 to create, 0 to update, 30 unchanged, 0 conflicts") {
		t.Fatalf("with the Job's service account: code %d\n%s%s", code, out, errOut)
	}
}

// migrateJobKubeconfig creates docs/migrate-calico-job.yaml's objects
// (the Job, its ServiceAccount and read-only ClusterRole, as the API
// server validates them) and returns the service account's token, a
// directory and a kubeconfig in it that authenticates with the token.
func migrateJobKubeconfig(t *testing.T, srv *kubeapiserver.Server) (token, dir, kubeconfig string) {
	t.Helper()
	job := filepath.Join(repoRoot(), "docs", "migrate-calico-job.yaml")
	if out, errOut, err := kubectl(t, srv, "create", "-f", job); err != nil {
		t.Fatalf("%s: %v\n%s%s", job, err, out, errOut)
	}
	token, err := srv.ServiceAccountToken(context.Background(), "kube-system", "routed-migrate")
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, srv.Kubeconfig(srv.URL, token), 0o600); err != nil {
		t.Fatal(err)
	}
	return token, dir, kubeconfig
}

// calicoNodeDaemonSet is calico-node's DaemonSet as Calico's manifests
// name it, with the environment they give felix (no kube-controller-manager
// runs here: it starts no pod).
const calicoNodeDaemonSet = `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: calico-node, namespace: kube-system}
spec:
  selector: {matchLabels: {k8s-app: calico-node}}
  template:
    metadata: {labels: {k8s-app: calico-node}}
    spec:
      hostNetwork: true
      containers:
      - name: calico-node
        image: quay.io/calico/node:v3.31.0
        env:
        - {name: FELIX_DEFAULTENDPOINTTOHOSTACTION, value: ACCEPT}
`

// adminPolicyCRDs serve AdminNetworkPolicy and BaselineAdminNetworkPolicy
// in policy.networking.k8s.io/v1alpha1, as Calico's manifests install
// them (the schema left open: the tests list them, none is created).
var adminPolicyCRDs = adminPolicyCRD("adminnetworkpolicies", "AdminNetworkPolicy") + "---\n" +
	adminPolicyCRD("baselineadminnetworkpolicies", "BaselineAdminNetworkPolicy")

func adminPolicyCRD(plural, kind string) string {
	return fmt.Sprintf(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %[1]s.policy.networking.k8s.io
  annotations: {api-approved.kubernetes.io: "https://github.com/kubernetes-sigs/network-policy-api/pull/30"}
spec:
  group: policy.networking.k8s.io
  scope: Cluster
  names: {plural: %[1]s, singular: %[2]s, kind: %[3]s, listKind: %[3]sList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`, plural, strings.ToLower(kind), kind)
}
