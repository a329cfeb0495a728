package k8s_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/controllers"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/lab"
	"github.com/routed-net/routed/tests/testbin"
)

// migrationLab is a netns lab of three nodes on one subnet (Calico's
// BGP mode without encapsulation needs the nodes on one L2 segment, or a
// router that learns the blocks) that runs no routed yet.
func migrationLab(t *testing.T) *lab.Lab {
	t.Helper()
	cnitool, err := exec.LookPath("cnitool")
	if err != nil {
		cnitool = filepath.Join(refBinDir(t), "cnitool") // where tests/ensure-deps.sh installs it
	}
	bins := lab.Binaries{Cnitool: cnitool, Routed: testbin.Path(t, "routed"), Routedctl: testbin.Path(t, "routedctl"),
		RoutedCNI: testbin.Path(t, "routed-cni"), RoutedIPAM: testbin.Path(t, "routed-ipam")}
	idx := lab.ClaimIndex(t)
	topo := lab.DefaultTopology(fmt.Sprintf("rm%d", idx), idx)
	topo.NoRouterBGP = true
	topo.Nodes = topo.Nodes[:3]
	for i := range topo.Nodes {
		a := topo.SubnetA.Addr().As4()
		a[3] = byte(11 + i)
		topo.Nodes[i].Subnet, topo.Nodes[i].RR = "a", false
		topo.Nodes[i].Addr = netip.PrefixFrom(netip.AddrFrom4(a), topo.SubnetA.Bits())
	}
	dir := t.TempDir()
	l := lab.New(topo, bins, dir, t.Logf)
	t.Cleanup(func() {
		if t.Failed() {
			dumpLabLogs(t, dir)
		}
		l.Down(context.Background())
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := l.UpForMigration(ctx); err != nil {
		t.Fatalf("lab up: %v", err)
	}
	return l
}

// dumpLabLogs logs the tail of every log the lab wrote.
func dumpLabLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		t.Logf("---- %s (tail)\n%s", p, tail(string(b), 60))
	}
}

// apiRelay makes the API server reachable from inside a lab namespace
// (a node's, the router's) on that namespace's loopback, and returns a
// kubeconfig file for it.
func apiRelay(t *testing.T, srv *kubeapiserver.Server, netnsName, dir string) string {
	t.Helper()
	addr := labRelay(t, netnsName, strings.TrimPrefix(srv.URL, "https://"))
	kc := filepath.Join(dir, netnsName+".kubeconfig")
	if err := os.WriteFile(kc, srv.Kubeconfig("https://"+addr, srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// labRelay makes target (an address in the test's namespace) reachable
// from inside a lab namespace, and returns the address to use there.
func labRelay(t *testing.T, netnsName, target string) string {
	t.Helper()
	h, err := ns.GetNS(lab.NodeNetNSPath(netnsName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return newRelay(t, h, target)
}

// calicoLabADD runs Calico's CNI ADD (calicoCNIAdd) for p inside its
// lab node's namespace, with the pod in a new namespace named as the
// lab names its pods (so the lab's cleanup removes it), and returns the
// pod as the lab knows pods.
func calicoLabADD(ctx context.Context, t *testing.T, l *lab.Lab, bin, dir, kubeconfig string, datastore map[string]any, p *calicoPod) lab.Pod {
	t.Helper()
	podNS := fmt.Sprintf("%s-p-%s", l.Topo.Prefix, p.name)
	if out, err := exec.Command("ip", "netns", "add", podNS).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", podNS, err, out)
	}
	p.nodeNS = lab.NodeNetNSPath(p.node)
	calicoCNIAdd(ctx, t, bin, dir, kubeconfig, datastore, p, lab.NodeNetNSPath(podNS))
	return lab.Pod{Name: p.name, Node: p.node, NS: podNS, ContainerID: p.cid, IP: p.ip}
}

// calicoCNIAdd runs Calico's CNI ADD (calico-ipam) for p, the plugin in
// p.nodeNS and the pod's network namespace at podNetNS, on the
// datastore the datastore fields of its configuration name; the plugin
// reads the pod from the API server through kubeconfig on either
// datastore. It records the address the plugin gave and the host device
// it created (Calico's name for it, checked on the node).
func calicoCNIAdd(ctx context.Context, t *testing.T, bin, dir, kubeconfig string, datastore map[string]any, p *calicoPod, podNetNS string) {
	t.Helper()
	nodename := filepath.Join(dir, p.node+".nodename")
	if err := os.WriteFile(nodename, []byte(p.node), 0o644); err != nil {
		t.Fatal(err)
	}
	cniLog := filepath.Join(dir, p.node+"-calico-cni.log")
	conf := map[string]any{"cniVersion": "0.3.1", "name": "k8s-pod-network", "type": "calico",
		"nodename": p.node, "nodename_file": nodename, "ipam_lock_file": filepath.Join(dir, p.node+".ipam.lock"), "mtu": 1500,
		"log_level": "info", "log_file_path": cniLog, "ipam": map[string]string{"type": "calico-ipam"},
		"policy": map[string]string{"type": "k8s"}, "kubernetes": map[string]string{"kubeconfig": kubeconfig}}
	maps.Copy(conf, datastore)
	raw, _ := json.Marshal(conf)
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+p.nodeNS, filepath.Join(bin, "calico"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "CNI_COMMAND=ADD", "CNI_CONTAINERID=" + p.cid, "CNI_NETNS=" + podNetNS,
		"CNI_IFNAME=eth0", "CNI_PATH=" + bin, "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=" + p.ns + ";K8S_POD_NAME=" + p.name + ";K8S_POD_INFRA_CONTAINER_ID=" + p.cid}
	cmd.Stdin = strings.NewReader(string(raw))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b, _ := os.ReadFile(cniLog)
		t.Fatalf("Calico's CNI ADD for %s/%s on %s: %v\n%s%s\n%s", p.ns, p.name, p.node, err, out, stderr.String(), tail(string(b), 30))
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 || len(res.IPs) > 2 {
		t.Fatalf("Calico's CNI result: %v %s", err, out)
	}
	// An IPv4 address, and an IPv6 one where the IPAM assigns both.
	for _, ip := range res.IPs {
		addr, _, _ := strings.Cut(ip.Address, "/")
		if strings.Contains(addr, ":") {
			p.ip6 = addr
		} else {
			p.ip = addr
		}
	}
	if p.ip == "" {
		t.Fatalf("Calico's CNI result has no IPv4 address: %s", out)
	}
	p.dev = calicoVeth(p.ns, p.name)
	if out, err := exec.Command("nsenter", "--net="+p.nodeNS, "ip", "link", "show", "dev", p.dev).CombinedOutput(); err != nil {
		t.Fatalf("Calico's CNI ADD for %s/%s left no %s on %s: %v %s", p.ns, p.name, p.dev, p.node, err, out)
	}
}

// migrateLive freezes Calico's IPAM, plans and runs the migration from
// the router namespace (routedctl reaches routed's etcd there, and
// Calico's datastore through a relay), enables routed's copy of the
// pool and checks IPAM: docs/migrate-calico.md's steps 2 to 4 of a live
// switch. The policies keep the names Calico's users know, and the
// namespace and service-account profiles are routed-controllers' to
// keep up to date from here on.
func migrateLive(ctx context.Context, t *testing.T, src liveCalico, l *lab.Lab, dir string) {
	t.Helper()
	src.freeze(ctx, t)
	from := src.from(t, l, dir)
	plan, err := l.Ctl(ctx, append([]string{"migrate", "calico", "--dry-run"}, from...)...)
	if err != nil {
		t.Fatalf("migrate --dry-run: %v\n%s", err, plan)
	}
	out, err := l.Ctl(ctx, append([]string{"migrate", "calico"}, from...)...)
	t.Logf("migration:\n%s", out)
	if err != nil || !strings.Contains(out, " 0 conflicts") || strings.Contains(out, "Not carried over: pod") || strings.Contains(out, "Not carried over: WorkloadEndpoint") {
		t.Fatalf("migrate: %v\nplan:\n%s", err, plan)
	}
	for _, r := range [][]string{{"globalnetworkpolicy", "deny-tcp-" + fmt.Sprint(gnpDenied)}, {"networkpolicy", src.namespace() + "/db-1-not-from-web"}} {
		if out, err := l.Ctl(ctx, "get", r[0], r[1]); err != nil {
			t.Errorf("Calico's %s %s is not in routed under its name: %v\n%s", r[0], r[1], err, out)
		}
	}
	for _, p := range []string{"kns." + src.namespace(), "ksa." + src.namespace() + ".default"} {
		if out, err := l.Ctl(ctx, "get", "profile", p, "-o", "yaml"); err != nil || !strings.Contains(out, controllers.OwnerAnnotation+": "+controllers.OwnerValue) {
			t.Errorf("profile %s is not routed-controllers' (they would never update or delete it): %v\n%s", p, err, out)
		}
	}
	pool, err := l.Ctl(ctx, "get", "ippool", "default-ipv4-ippool", "-o", "yaml")
	if err != nil || !strings.Contains(pool, "disabled: true") {
		t.Fatalf("routed's copy of the frozen pool: %v\n%s", err, pool)
	}
	f := filepath.Join(dir, "pool-enabled.yaml")
	if err := os.WriteFile(f, []byte(strings.Replace(pool, "disabled: true", "disabled: false", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := l.Ctl(ctx, "replace", "-f", f); err != nil {
		t.Fatalf("enabling routed's pool: %v\n%s", err, out)
	}
	if out, err := l.Ctl(ctx, "ipam", "check"); err != nil || !strings.Contains(out, "No IPAM problems found") {
		t.Fatalf("ipam check after the migration: %v\n%s", err, out)
	}
}

// checkAfterLiveMigration: every pod kept its address (in its namespace,
// and in routed's IPAM under Calico's handle), `ipam check` is clean, the
// migrated NetworkPolicy's deny holds, and a new pod on a switched node
// gets an address from that node's migrated block and reaches the old
// pods both ways.
func checkAfterLiveMigration(ctx context.Context, t *testing.T, l *lab.Lab, cpods []*calicoPod, pods map[string]lab.Pod, blocks map[string][]netip.Prefix) {
	t.Helper()
	for _, p := range cpods {
		addrs, err := exec.Command("ip", "-n", pods[p.node].NS, "-4", "-o", "addr", "show", "dev", "eth0").CombinedOutput()
		if err != nil || !strings.Contains(string(addrs), " "+p.ip+"/32 ") {
			t.Errorf("%s/%s no longer has Calico's address %s: %v\n%s", p.ns, p.name, p.ip, err, addrs)
		}
		if out, err := l.Ctl(ctx, "ipam", "show", "--ip", p.ip); err != nil || !strings.Contains(out, "k8s-pod-network."+p.cid) {
			t.Errorf("%s is not held by Calico's handle in routed's IPAM: %v\n%s", p.ip, err, out)
		}
	}
	if out, err := l.Ctl(ctx, "ipam", "check"); err != nil || !strings.Contains(out, "No IPAM problems found") {
		t.Errorf("ipam check after the switch: %v\n%s", err, out)
	}
	web, db1, db2 := pods[cpods[0].node], pods[cpods[1].node], pods[cpods[2].node]
	if reaches(t, web, db1.IP, npDenied) {
		t.Errorf("%s reached %s:%d, which the migrated NetworkPolicy denies", web.Name, db1.Name, npDenied)
	}
	if !reaches(t, db2, db1.IP, npDenied) {
		t.Errorf("%s cannot reach %s:%d (the NetworkPolicy denies only web-1)", db2.Name, db1.Name, npDenied)
	}

	node := cpods[1].node
	fresh, err := l.AddPod(ctx, node, "fresh-1")
	if err != nil {
		t.Fatalf("a new pod on %s after the switch: %v", node, err)
	}
	ip := netip.MustParseAddr(fresh.IP)
	inBlock := false
	for _, b := range blocks[node] {
		inBlock = inBlock || b.Contains(ip)
	}
	if !inBlock {
		t.Errorf("new pod on %s got %s, outside its migrated blocks %v", node, ip, blocks[node])
	}
	if err := lab.TCPListen(ctx, fresh, openPort); err != nil {
		t.Fatal(err)
	}
	// The first connection of each direction is reported when it fails
	// (the pod's CNI ADD has returned); the check waits up to 10 s.
	for _, old := range pods {
		for _, dir := range [][2]lab.Pod{{fresh, old}, {old, fresh}} {
			start := time.Now()
			first := true
			testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() string {
				if reaches(t, dir[0], dir[1].IP, openPort) {
					return ""
				}
				if first {
					t.Logf("first connection %s -> %s:%d after the new pod's ADD did not complete", dir[0].Name, dir[1].Name, openPort)
					first = false
				}
				return fmt.Sprintf("%s (%s) cannot reach %s (%s):%d", dir[0].Name, dir[0].IP, dir[1].Name, dir[1].IP, openPort)
			})
			if !first {
				t.Logf("%s -> %s:%d connected %s after the first try", dir[0].Name, dir[1].Name, openPort, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	if !t.Failed() {
		t.Logf("new pod %s on %s: %s, in the migrated block, reaches the migrated pods both ways", fresh.Name, node, fresh.IP)
	}
}
