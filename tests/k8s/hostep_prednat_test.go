package k8s_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/routed-net/routed/felix"
	"github.com/routed-net/routed/internal/dstest"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	k8scluster "github.com/routed-net/routed/tests/k8s/cluster"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// The addresses of TestHostEndpointPreDNATNodePort: the node's external
// interface, the two clients beyond it (one namespace, two addresses)
// and the pod.
var (
	pdnNode    = netip.MustParseAddr("198.18.37.1")
	pdnDenied  = netip.MustParseAddr("198.18.37.10")
	pdnAllowed = netip.MustParseAddr("198.18.37.11")
	pdnPod     = netip.MustParseAddr("10.65.37.5")
)

// pdnHostModel is what an operator applies (Calico's documents, decoded
// as routedctl apply decodes them, stored in routed's datastore): the
// profile of the pod and the host endpoint, a HostEndpoint for the node's
// external interface eth0 with Calico's allow-all profile, and the
// preDNAT policy nodeport: the denied client may not reach the NodePort,
// the allowed one may.
const pdnHostModel = `
apiVersion: projectcalico.org/v3
kind: Profile
metadata: {name: projectcalico-default-allow}
spec:
  ingress: [{action: Allow}]
  egress: [{action: Allow}]
---
apiVersion: projectcalico.org/v3
kind: HostEndpoint
metadata: {name: %[1]s-eth0, labels: {role: edge}}
spec: {node: %[1]s, interfaceName: eth0, profiles: [projectcalico-default-allow]}
---
apiVersion: projectcalico.org/v3
kind: GlobalNetworkPolicy
metadata: {name: nodeport}
spec:
  selector: role == 'edge'
  preDNAT: true
  applyOnForward: true
  types: [Ingress]
  ingress:
  - {action: Deny, protocol: TCP, source: {nets: [%[2]s/32]}, destination: {ports: [%[4]d]}}
  - {action: Allow, protocol: TCP, source: {nets: [%[3]s/32]}, destination: {ports: [%[4]d]}}
`

// TestHostEndpointPreDNATNodePort: a preDNAT GlobalNetworkPolicy on a
// host endpoint decides on a NodePort before kube-proxy's DNAT. A node
// network namespace runs the real kube-proxy (iptables mode, as the
// cluster of `make k8s-demo` runs it; tests/k8s/cluster) against the
// package's kube-apiserver, for a NodePort Service whose one endpoint is
// a pod (its own namespace, a cali veth, wired as routed's CNI wires
// it) serving TCP; felix runs for the node in that namespace, fed by the
// node's feed from routed's datastore (a real etcd), where the test
// writes the resources. Two client addresses beyond the node's eth0
// connect to the node's address on the NodePort with real TCP and must
// get the pod's answer: both do before any host endpoint; with the
// HostEndpoint on eth0 and the preDNAT policy (deny one source, allow
// the other) stored, the denied client is stopped, and over many rounds
// sampled together the allowed one connects in each and the denied one
// in none; with the policy deleted the denied client gets through
// again. The rules name the NodePort, which only a pre-DNAT verdict
// sees: the same policy without preDNAT stops the allowed client too
// (after the DNAT the port is the pod's 8080).
//
// IPv4 only: the test cluster's Services are single-stack IPv4
// (kube-apiserver's --service-cluster-ip-range=10.96.0.0/16), so no
// IPv6 NodePort exists to police; felix/policy's host lab covers
// preDNAT over IPv6 against a stand-in DNAT.
func TestHostEndpointPreDNATNodePort(t *testing.T) {
	srv := cluster(t)
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kubeNode, err := kubeapiserver.BuildNode(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	id := randHex(3)
	nodeName := "pdn-" + id
	node, ext, pod := newNetNS(t), newNetNS(t), newNetNS(t)
	pdnNetwork(t, node, ext, pod)
	serveAs(t, pod, netip.AddrPortFrom(pdnPod, 8080), "pod "+id)

	rc, err := clientcmd.RESTConfigFromKubeConfig(srv.Kubeconfig(srv.URL, srv.AdminToken))
	if err != nil {
		t.Fatal(err)
	}
	kube := kubernetes.NewForConfigOrDie(rc)
	nodePort := pdnService(ctx, t, kube, nodeName)
	proxyLog := startKubeProxy(t, srv, kubeNode, node, nodeName)

	// connect is one TCP connection from src to the node's NodePort: nil
	// when the pod answered.
	target := netip.AddrPortFrom(pdnNode, uint16(nodePort))
	connect := func(src netip.Addr, limit time.Duration) error {
		var got string
		err := ext.Do(func(ns.NetNS) error {
			d := net.Dialer{Timeout: limit, LocalAddr: &net.TCPAddr{IP: src.AsSlice()}}
			c, err := d.Dial("tcp", target.String())
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(limit))
			got, err = bufio.NewReader(c).ReadString('\n')
			return err
		})
		if err == nil && got != "pod "+id+"\n" {
			err = fmt.Errorf("answered %q, not the pod", got)
		}
		return err
	}
	reaches := func(why string, limit time.Duration, srcs ...netip.Addr) {
		t.Helper()
		if err := k8scluster.WaitFor(ctx, limit, why, func() error {
			for _, s := range srcs {
				if err := connect(s, time.Second); err != nil {
					return fmt.Errorf("%s to %s: %w", s, target, err)
				}
			}
			return nil
		}); err != nil {
			pdnFail(t, node, proxyLog, err)
		}
	}
	start := time.Now()
	reaches("kube-proxy's NodePort, no policy", 45*time.Second, pdnDenied, pdnAllowed)
	t.Logf("kube-proxy serves NodePort %d in %s", nodePort, time.Since(start).Round(100*time.Millisecond))

	// routed's side, as on a node: the resources in routed's datastore
	// (a real etcd), the node's feed from it, felix programming the node
	// namespace. The pod's endpoint first, with no host endpoint.
	store := dstest.Client(t)
	if err := store.EnsureDefaultTiers(ctx); err != nil {
		t.Fatal(err)
	}
	wep := &api.WorkloadEndpoint{Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(nodeName, "k8s", "pdn", "web", "", "eth0"), Namespace: "pdn",
		Labels: map[string]string{"app": "web"}},
		Spec: api.WorkloadEndpointSpec{Node: nodeName, Orchestrator: "k8s", Namespace: "pdn", Pod: "web", ContainerID: "c0ffee" + id, Endpoint: "eth0",
			InterfaceName: "calipdn0", ContainerInterface: "eth0", IPNetworks: []string{netip.PrefixFrom(pdnPod, 32).String()},
			Profiles: []string{api.DefaultAllowProfile}}}
	docs, err := api.Decode([]byte(fmt.Sprintf(pdnHostModel, nodeName, pdnDenied, pdnAllowed, nodePort)))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(rs ...api.Resource) {
		t.Helper()
		for _, r := range rs {
			if _, err := store.Apply(ctx, r); err != nil {
				t.Fatalf("apply %s %s: %v", r.GetKind(), r.Meta().Name, err)
			}
		}
	}
	profile, hostModel := docs.Resources[0], docs.Resources[1:]
	apply(profile, wep)
	startFelix(t, store, node, nodeName)
	reaches("kube-proxy's NodePort, felix running, no host endpoint", 30*time.Second, pdnDenied, pdnAllowed)

	start = time.Now()
	apply(hostModel...)
	if err := k8scluster.WaitFor(ctx, 30*time.Second, "the denied client stopped by the preDNAT policy", func() error {
		if err := connect(pdnDenied, 300*time.Millisecond); err == nil {
			return fmt.Errorf("%s still reaches the pod through NodePort %d", pdnDenied, nodePort)
		}
		return nil
	}); err != nil {
		pdnFail(t, node, proxyLog, err)
	}
	reaches("the allowed client through the preDNAT policy", 15*time.Second, pdnAllowed)
	// Sampled together: the allowed client keeps connecting while the
	// denied one, over as many attempts, never does.
	const rounds = 25
	for i := 0; i < rounds; i++ {
		if err := connect(pdnAllowed, 2*time.Second); err != nil {
			pdnFail(t, node, proxyLog, fmt.Errorf("round %d: the allowed client %s: %w", i, pdnAllowed, err))
		}
		if err := connect(pdnDenied, 300*time.Millisecond); err == nil {
			pdnFail(t, node, proxyLog, fmt.Errorf("round %d: the denied client %s reached the pod through NodePort %d past the preDNAT deny", i, pdnDenied, nodePort))
		}
	}
	t.Logf("preDNAT: %d rounds, the allowed client connected in each, the denied one in none (%s since the apply)", rounds, time.Since(start).Round(100*time.Millisecond))

	gnp := hostModel[len(hostModel)-1]
	cur, err := store.Get(ctx, gnp.GetKind(), api.StoreName(gnp))
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, gnp.GetKind(), api.StoreName(gnp), cur.Meta().ResourceVersion); err != nil {
		t.Fatal(err)
	}
	reaches("the denied client with the policy deleted", 15*time.Second, pdnDenied, pdnAllowed)
}

// startFelix runs felix for nodeName in the node namespace, fed from
// store by the node's feed, as routed-node runs it (IPIP and NAT
// outgoing off: the test has no pool); both stop when the test ends.
func startFelix(t *testing.T, store *datastore.Client, node ns.NetNS, nodeName string) {
	t.Helper()
	f, err := felix.New(felix.Config{NodeName: nodeName, NetNSPath: node.Path(), MTUFile: filepath.Join(t.TempDir(), "mtu"),
		Features: felix.Features{DisableIPIP: true, DisableNATOutgoing: true},
		Log:      logrus.WithField("component", "felix").WithField("node", nodeName)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fd := feed.New(store, feed.Options{})
	fc := f.Consumer()
	fd.Subscribe("felix", fc.SubscribedKinds(), fc)
	done := make(chan error, 2)
	go func() { done <- f.Run(ctx) }()
	go func() { done <- fd.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for i := 0; i < 2; i++ {
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("felix or its feed returned %v", err)
			}
		}
	})
}

// pdnNetwork wires the test's namespaces: the node's eth0 (pdnNode/24)
// to ext (both client addresses), and the pod's eth0 (pdnPod/32) to the
// node's calipdn0 as routed's CNI does (a /32 route on the node; the
// pod's default route through 169.254.1.1, a permanent neighbour at the
// node side's MAC).
func pdnNetwork(t *testing.T, node, ext, pod ns.NetNS) {
	t.Helper()
	name := func(n ns.NetNS) string { return filepath.Base(n.Path()) }
	nn, en, pn := name(node), name(ext), name(pod)
	for _, args := range [][]string{
		{"-n", nn, "link", "add", "eth0", "type", "veth", "peer", "name", "ext0", "netns", en},
		{"-n", nn, "link", "add", "calipdn0", "address", "ee:ee:ee:ee:ee:ee", "type", "veth", "peer", "name", "eth0", "netns", pn},
		{"-n", nn, "addr", "add", pdnNode.String() + "/24", "dev", "eth0"},
		{"-n", en, "addr", "add", pdnDenied.String() + "/24", "dev", "ext0"},
		{"-n", en, "addr", "add", pdnAllowed.String() + "/24", "dev", "ext0"},
		{"-n", pn, "addr", "add", pdnPod.String() + "/32", "dev", "eth0"},
		{"-n", nn, "link", "set", "lo", "up"}, {"-n", en, "link", "set", "lo", "up"}, {"-n", pn, "link", "set", "lo", "up"},
		{"-n", nn, "link", "set", "eth0", "up"}, {"-n", nn, "link", "set", "calipdn0", "up"},
		{"-n", en, "link", "set", "ext0", "up"}, {"-n", pn, "link", "set", "eth0", "up"},
		{"-n", nn, "route", "add", pdnPod.String() + "/32", "dev", "calipdn0"},
		{"-n", pn, "route", "add", "169.254.1.1", "dev", "eth0", "scope", "link"},
		{"-n", pn, "neigh", "add", "169.254.1.1", "lladdr", "ee:ee:ee:ee:ee:ee", "dev", "eth0", "nud", "permanent"},
		{"-n", pn, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "exec", nn, "sysctl", "-w", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		t.Fatalf("sysctl net.ipv4.ip_forward=1 on the node: %v: %s", err, out)
	}
}

// serveAs answers every TCP connection to addr, in n, with line.
func serveAs(t *testing.T, n ns.NetNS, addr netip.AddrPort, line string) {
	t.Helper()
	var l net.Listener
	if err := n.Do(func(ns.NetNS) error {
		var err error
		l, err = net.Listen("tcp", addr.String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(line + "\n"))
			c.Close()
		}
	}()
}

// pdnService creates, in a namespace of its own, the Node nodeName
// (with pdnNode as its address, as kubelet would register it) and a
// NodePort Service with one ready endpoint, the pod on that node,
// written as kube-controller-manager's endpointslice controller would
// (the package's API server runs none). It returns the allocated
// NodePort.
func pdnService(ctx context.Context, t *testing.T, kube kubernetes.Interface, nodeName string) int32 {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	n, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), nodeName, metav1.DeleteOptions{}) })
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: pdnNode.String()}, {Type: corev1.NodeHostName, Address: nodeName}}
	_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	must(err)

	ns := nodeName
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	svc, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
			Ports: []corev1.ServicePort{{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}}},
		metav1.CreateOptions{})
	must(err)
	// The package's API server runs no namespace controller: the
	// namespace's deletion would leave these behind for later tests.
	t.Cleanup(func() {
		_ = kube.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), "web-a", metav1.DeleteOptions{})
		_ = kube.CoreV1().Services(ns).Delete(context.Background(), "web", metav1.DeleteOptions{})
	})
	nodePort := svc.Spec.Ports[0].NodePort
	if nodePort == 0 {
		t.Fatalf("Service %s/web got no NodePort: %+v", ns, svc.Spec)
	}
	ready, port, portName, proto := true, int32(8080), "", corev1.ProtocolTCP
	_, err = kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-a", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{pdnPod.String()}, NodeName: &nodeName,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}, metav1.CreateOptions{})
	must(err)
	return nodePort
}

// startKubeProxy runs kube-proxy (iptables mode, the flags of
// tests/k8s/cluster) in node as nodeName, reaching the API server
// through a relay on the node's loopback; it is stopped by its PID when
// the test ends. It returns kube-proxy's log file.
func startKubeProxy(t *testing.T, srv *kubeapiserver.Server, kubeNode string, node ns.NetNS, nodeName string) string {
	t.Helper()
	dir := t.TempDir()
	relay := newRelay(t, node, strings.TrimPrefix(srv.URL, "https://"))
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, srv.Kubeconfig("https://"+relay, srv.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "kube-proxy.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net="+node.Path(), kubeNode, "kube-proxy",
		"--kubeconfig", kc, "--hostname-override", nodeName, "--proxy-mode", "iptables",
		"--conntrack-max-per-core", "0", "--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256", "--v=1")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start kube-proxy: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return logPath
}

// pdnFail ends the test on err with the evidence: the node's nftables
// ruleset (kube-proxy's iptables-nft tables and routed's) and
// kube-proxy's log.
func pdnFail(t *testing.T, node ns.NetNS, proxyLog string, err error) {
	t.Helper()
	rules, rerr := exec.Command("nsenter", "--net="+node.Path(), "nft", "list", "ruleset").CombinedOutput()
	if rerr != nil {
		rules = append(rules, []byte(rerr.Error())...)
	}
	b, lerr := os.ReadFile(proxyLog)
	if lerr != nil && !errors.Is(lerr, os.ErrNotExist) {
		b = []byte(lerr.Error())
	}
	t.Logf("the node's ruleset:\n%s", rules)
	t.Logf("kube-proxy:\n%s", k8scluster.LastLines(string(b), 60))
	t.Fatal(err)
}
