package k8s_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/lab"
)

// kubeletPod is a pod of TestMigrateCalicoKDDOnKubelet: a busybox
// container sleeping (busybox sleep) for a number of seconds no other process on the
// machine sleeps for (its marker), which finds its process, whose
// network namespace the test enters by a name of its own (ip netns
// attach) to send and answer probes as the pod.
type kubeletPod struct {
	name string
	node *k8scluster.Node
	// What the API server and the machine said once it ran.
	marker       int
	uid, ip      string
	containerID  string
	restarts     int
	pid          int
	annotations  map[string]string
	calicoHandle string // Calico's IPAM handle for its address, when Calico gave it
	lab          lab.Pod
}

// create creates the pod in namespace shop on its node, labelled
// app=<name> (the migrated policies select by it).
func (p *kubeletPod) create(t *testing.T, c *k8scluster.Cluster, ctx context.Context) {
	t.Helper()
	p.marker = 3_000_000 + rand.IntN(1_000_000)
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: shop, labels: {app: %s}}
spec:
  nodeName: %s
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: %s
    imagePullPolicy: Never
    command: [/bin/busybox, sleep, "%d"]
`, p.name, p.name, p.node.Name, k8scluster.BusyboxImage, p.marker)
	f := filepath.Join(t.TempDir(), p.name+".yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := c.Kubectl(ctx, "create", "-f", f); err != nil {
		t.Fatalf("creating pod %s: %v\n%s", p.name, err, out)
	}
}

// podState is what the API server reports of a pod.
type podState struct {
	Metadata struct {
		UID         string            `json:"uid"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Status struct {
		PodIP             string `json:"podIP"`
		ContainerStatuses []struct {
			ContainerID  string `json:"containerID"`
			RestartCount int    `json:"restartCount"`
			Ready        bool   `json:"ready"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func (p *kubeletPod) state(t *testing.T, c *k8scluster.Cluster, ctx context.Context) podState {
	t.Helper()
	out, err := c.Kubectl(ctx, "-n", "shop", "get", "pod", p.name, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var s podState
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// running waits until the pod is Ready, then records its identity, its
// address and its process, and names its network namespace.
func (p *kubeletPod) running(t *testing.T, c *k8scluster.Cluster, ctx context.Context) {
	t.Helper()
	if out, err := c.Kubectl(ctx, "-n", "shop", "wait", "pod", p.name, "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Logf("kubelet on %s:\n%s", p.node.Name, c.Logs("kubelet"+strings.TrimPrefix(p.node.Name, "rk8c-node"), 30))
		t.Fatalf("pod %s not Ready: %v\n%s", p.name, err, out)
	}
	s := p.state(t, c, ctx)
	if len(s.Status.ContainerStatuses) != 1 || s.Status.PodIP == "" {
		t.Fatalf("pod %s: no container status or address: %+v", p.name, s.Status)
	}
	p.uid, p.ip, p.annotations = s.Metadata.UID, s.Status.PodIP, s.Metadata.Annotations
	p.containerID, p.restarts = s.Status.ContainerStatuses[0].ContainerID, s.Status.ContainerStatuses[0].RestartCount
	p.pid = sleeperPID(t, p.marker)
	nsName := "rk8c-p-" + p.name
	_ = exec.Command("ip", "netns", "delete", nsName).Run()
	if out, err := exec.Command("ip", "netns", "attach", nsName, strconv.Itoa(p.pid)).CombinedOutput(); err != nil {
		t.Fatalf("ip netns attach %s %d: %v %s", nsName, p.pid, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", nsName).Run() })
	p.lab = lab.Pod{Name: p.name, Node: p.node.Name, NS: nsName, IP: p.ip}
}

// sleeperPID is the process running `busybox sleep marker`.
func sleeperPID(t *testing.T, marker int) int {
	t.Helper()
	want := []byte("/bin/busybox\x00sleep\x00" + strconv.Itoa(marker) + "\x00")
	var pid int
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
		ents, err := os.ReadDir("/proc")
		if err != nil {
			return err.Error()
		}
		for _, e := range ents {
			n, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && bytes.Equal(b, want) {
				pid = n
				return ""
			}
		}
		return fmt.Sprintf("no process `sleep %d`", marker)
	})
	return pid
}

// unchanged checks that the pod was not restarted or set up again: the
// same UID, container, restart count and address as when it started,
// and its first process still running.
func (p *kubeletPod) unchanged(t *testing.T, c *k8scluster.Cluster, ctx context.Context) {
	t.Helper()
	s := p.state(t, c, ctx)
	switch {
	case s.Metadata.UID != p.uid:
		t.Errorf("pod %s was recreated: uid %s, was %s", p.name, s.Metadata.UID, p.uid)
	case len(s.Status.ContainerStatuses) != 1:
		t.Errorf("pod %s: container statuses %+v", p.name, s.Status.ContainerStatuses)
	case s.Status.ContainerStatuses[0].ContainerID != p.containerID || s.Status.ContainerStatuses[0].RestartCount != p.restarts:
		t.Errorf("pod %s restarted: container %s (restarts %d), was %s (%d)", p.name, s.Status.ContainerStatuses[0].ContainerID,
			s.Status.ContainerStatuses[0].RestartCount, p.containerID, p.restarts)
	case s.Status.PodIP != p.ip:
		t.Errorf("pod %s: address %s, was %s", p.name, s.Status.PodIP, p.ip)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid)); err != nil || !strings.Contains(string(b), strconv.Itoa(p.marker)) {
		t.Errorf("pod %s: its process %d is gone (%v)", p.name, p.pid, err)
	}
	addrs, err := exec.Command("ip", "-n", p.lab.NS, "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(addrs), " "+p.ip+"/32 ") {
		t.Errorf("pod %s no longer has %s on eth0: %v\n%s", p.name, p.ip, err, addrs)
	}
}

// remove deletes the pod and waits until it is gone.
func (p *kubeletPod) remove(t *testing.T, c *k8scluster.Cluster, ctx context.Context) {
	t.Helper()
	if out, err := c.Kubectl(ctx, "-n", "shop", "delete", "pod", p.name, "--wait", "--timeout=60s"); err != nil {
		t.Fatalf("deleting pod %s: %v\n%s", p.name, err, out)
	}
}

// calicoHandles maps each pod to the IPAM handle of its address in
// Calico's blocks (`kubectl get ipamblocks.crd.projectcalico.org -o json`).
func calicoHandles(t *testing.T, out string) map[string]string {
	t.Helper()
	var list struct {
		Items []struct {
			Spec struct {
				Attributes []struct {
					Handle    string            `json:"handle_id"`
					Secondary map[string]string `json:"secondary"`
				} `json:"attributes"`
			} `json:"spec"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	handles := map[string]string{}
	for _, it := range list.Items {
		for _, a := range it.Spec.Attributes {
			if pod := a.Secondary["pod"]; pod != "" {
				handles[pod] = a.Handle
			}
		}
	}
	return handles
}

// installCalicoCNI installs Calico's CNI plugin and IPAM (one binary,
// named calico and calico-ipam), the reference loopback plugin
// (containerd sets up each sandbox's lo with it; Calico's install-cni
// ships it too) and the configuration on node n as Calico's install-cni
// does: 10-calico.conflist, sorting before routed's, and
// calico-kubeconfig in /etc/cni/net.d, the Kubernetes datastore reached
// with the node's kubeconfig. The first node's directories are the
// host's: what is written there is removed when the test ends.
func installCalicoCNI(t *testing.T, calico string, n *k8scluster.Node, kubeconfig, dir string) {
	t.Helper()
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(calico)
	if err != nil {
		t.Fatal(err)
	}
	loopback := filepath.Join(dir, "loopback")
	if _, err := os.Stat(loopback); err != nil {
		// The version our go.mod requires (its packages are our tests').
		if out, err := exec.Command("go", "build", "-o", loopback, "github.com/containernetworking/plugins/plugins/main/loopback").CombinedOutput(); err != nil {
			t.Fatalf("building the loopback plugin: %v\n%s", err, out)
		}
	}
	lo, err := os.ReadFile(loopback)
	if err != nil {
		t.Fatal(err)
	}
	conf, _ := json.Marshal(map[string]any{"name": "k8s-pod-network", "cniVersion": "0.3.1", "plugins": []map[string]any{{
		"type": "calico", "datastore_type": "kubernetes", "nodename": n.Name, "nodename_file_optional": true, "mtu": 1500,
		"log_level": "info", "log_file_path": filepath.Join(dir, n.Name+"-calico-cni.log"),
		"ipam_lock_file": filepath.Join(dir, n.Name+"-calico-ipam.lock"), "ipam": map[string]string{"type": "calico-ipam"},
		"policy": map[string]string{"type": "k8s"}, "kubernetes": map[string]string{"kubeconfig": "/etc/cni/net.d/calico-kubeconfig"}}}})
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{"/opt/cni/bin/calico", b, 0o755},
		{"/opt/cni/bin/calico-ipam", b, 0o755},
		{"/opt/cni/bin/loopback", lo, 0o755},
		{"/etc/cni/net.d/calico-kubeconfig", kc, 0o600},
		{"/etc/cni/net.d/10-calico.conflist", conf, 0o644},
	}
	for _, f := range files {
		path := n.HostPath(f.path)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(path) })
	}
}

// otherNode is the cluster's node that is not n.
func otherNode(c *k8scluster.Cluster, n *k8scluster.Node) *k8scluster.Node {
	if c.Nodes[0] == n {
		return c.Nodes[1]
	}
	return c.Nodes[0]
}

// waitNodeRoutes waits until node n's kernel routes each block via next
// with the given protocol ("proto bird", "proto 82").
func waitNodeRoutes(t *testing.T, c *k8scluster.Cluster, n *k8scluster.Node, blocks []netip.Prefix, next netip.Addr, proto string) {
	t.Helper()
	waitRoutesVia(t, n.Name, blocks, next, proto, func() (string, error) {
		routes, err := exec.Command("ip", "-n", n.Name, "-4", "route", "show").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%v: %s", err, routes)
		}
		return string(routes), nil
	})
}

// migrateStep62 is the shell block of docs/migrate-calico.md's step 6.2
// (Kubernetes datastore): what an operator runs on the node once
// routed-node is Ready there.
func migrateStep62(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "migrate-calico.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "Calico left, now that routed enforces there:\n")
	if !ok {
		t.Fatal("docs/migrate-calico.md: step 6.2's text not found")
	}
	_, block, ok := strings.Cut(after, "```\n")
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok || !strings.Contains(block, "rm -f /etc/cni/net.d/10-calico.conflist") {
		t.Fatalf("docs/migrate-calico.md: step 6.2's block not found:\n%s", block)
	}
	return block
}

// calicoLeft checks that step 6.2 left nothing of Calico on node n: no
// CNI configuration, no BIRD route, no nftables table of felix's.
func calicoLeft(ctx context.Context, t *testing.T, c *k8scluster.Cluster, n *k8scluster.Node) {
	t.Helper()
	if _, err := os.Stat(n.HostPath("/etc/cni/net.d/10-calico.conflist")); !os.IsNotExist(err) {
		t.Errorf("%s: 10-calico.conflist still there after step 6.2 (%v)", n.Name, err)
	}
	if out, err := exec.Command("ip", "-n", n.Name, "route", "show", "proto", "bird").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("%s: BIRD's routes after step 6.2: %v\n%s", n.Name, err, out)
	}
	tables, err := c.NodeExecOn(ctx, n, "nft", "list", "tables")
	if err != nil || strings.Contains(tables, "calico") {
		t.Errorf("%s: nftables after step 6.2: %v\n%s", n.Name, err, tables)
	}
}
