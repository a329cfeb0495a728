// Package cni_test drives the built routed-cni and routed-ipam binaries
// the way a container runtime does (libcni, cnitool), against a real
// embedded etcd and the real kernel. Every test builds its own "node": a
// fresh network namespace in which the plugins run, so host-side veths and
// routes land there and never on the machine running the tests. Pods are
// further fresh namespaces. Everything is removed in t.Cleanup.
package cni_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"go.etcd.io/etcd/client/pkg/v3/transport"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/pkg/kernel"
	"github.com/routed-net/routed/tests/cnitest"
	"github.com/routed-net/routed/tests/testbin"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/internal/testpki"
)

// The helpers tests/k8s shares, under the names these tests use.
var (
	newNetNS = cnitest.NewNetNS
	cniCode  = cnitest.Code
	randHex  = cnitest.RandHex
)

// requireRoot fails (in CI) or skips loudly (elsewhere) without root.
func requireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, veths, routes")
}

// refBinDir holds the reference plugins installed by tests/ensure-deps.sh.
func refBinDir(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env GOPATH: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "bin")
	for _, p := range []string{"host-local", "ptp", "portmap", "bandwidth", "cnitool"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("%s missing in %s: run `make deps` (tests/ensure-deps.sh)", p, dir)
		}
	}
	return dir
}

// node is one test's node: a host netns, an etcd reachable from it, and
// a libcni runtime that runs the plugins inside it.
type node struct {
	t       testing.TB
	name    string
	hostNS  ns.NetNS
	etcd    []string // endpoints as seen from the test process
	hostEP  string   // etcd endpoint as seen from the host netns
	proxy   *cnitest.Relay
	store   *datastore.Client
	binDir  string // directory of routed-cni (and routed-ipam)
	refDir  string
	cni     *libcni.CNIConfig
	logFile string
	ipamDir string       // host-local dataDir
	pki     *testpki.PKI // etcd's TLS, when on
}

// datastoreConfig is how the test process reaches etcd.
func (n *node) datastoreConfig() datastore.Config {
	cfg := datastore.Config{Endpoints: n.etcd}
	if n.pki != nil {
		cfg.CACertFile, cfg.CertFile, cfg.KeyFile = n.pki.CAFile, n.pki.ClientCert, n.pki.ClientKey
	}
	return cfg
}

// metricsClient reads etcd's /metrics (with the client certificate when
// etcd runs TLS).
func (n *node) metricsClient() *http.Client {
	if n.pki == nil {
		return http.DefaultClient
	}
	tlsCfg, err := transport.TLSInfo{CertFile: n.pki.ClientCert, KeyFile: n.pki.ClientKey, TrustedCAFile: n.pki.CAFile}.ClientConfig()
	if err != nil {
		n.t.Fatal(err)
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
}

func newNode(t testing.TB) *node { return newNodeWith(t, etcdtest.Start, nil) }

// newDurableTLSNode is newNode with etcd as the manifests deploy it:
// fsync on, clients over TLS with a client certificate.
func newDurableTLSNode(t testing.TB) *node {
	pki := testpki.New(t)
	return newNodeWith(t, func(t testing.TB) *etcdserver.Server {
		s, err := etcdserver.Start(context.Background(), etcdserver.Config{
			Dir: t.TempDir(), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0", LogLevel: "fatal",
			TLS: transport.TLSInfo{CertFile: pki.ServerCert, KeyFile: pki.ServerKey, TrustedCAFile: pki.CAFile, ClientCertAuth: true},
		})
		if err != nil {
			t.Fatalf("start TLS etcd: %v", err)
		}
		t.Cleanup(s.Close)
		return s
	}, &pki)
}

// newNodeWith is newNode with its etcd started by startEtcd
// (etcdtest.StartDurable for benchmarks); pki, when set, is that etcd's
// TLS PKI, whose client certificate the plugins and the test use.
func newNodeWith(t testing.TB, startEtcd func(testing.TB) *etcdserver.Server, pki *testpki.PKI) *node {
	t.Helper()
	requireRoot(t)
	n := &node{t: t, name: "node-" + strings.ToLower(randHex(3)), pki: pki}
	srv := startEtcd(t)
	n.etcd = srv.Endpoints
	hostNS := newNetNS(t)
	n.hostNS = hostNS
	// proxy_arp answers for 169.254.1.1 only if the host has a route to it
	// through another interface, as real nodes do via their default
	// route. An uplink veth whose both ends stay in the host netns gives
	// the default route; nothing is ever sent through it.
	n.inHost(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		la := netlink.NewLinkAttrs()
		la.Name = "uplink0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: la, PeerName: "uplink1"}); err != nil {
			return err
		}
		for _, name := range []string{"uplink0", "uplink1"} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
		}
		up, _ := netlink.LinkByName("uplink0")
		return netlink.RouteAdd(&netlink.Route{LinkIndex: up.Attrs().Index, Dst: &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Scope: netlink.SCOPE_LINK})
	})
	// etcd listens on the test process's loopback; the plugins in the host
	// netns reach it through a forwarder listening on the host netns'
	// loopback.
	scheme, target, _ := strings.Cut(srv.Endpoints[0], "://")
	n.proxy = cnitest.NewRelay(t, hostNS, target)
	n.hostEP = scheme + "://" + n.proxy.Addr
	var err error
	n.store, err = datastore.New(n.datastoreConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.store.Close() })
	n.binDir = filepath.Dir(testbin.Path(t, "routed-cni"))
	if ipamDir := filepath.Dir(testbin.Path(t, "routed-ipam")); ipamDir != n.binDir {
		t.Fatalf("routed-cni (%s) and routed-ipam (%s) must share a directory", n.binDir, ipamDir)
	}
	n.refDir = refBinDir(t)
	n.cni = newRuntime([]string{n.binDir, n.refDir}, t.TempDir())
	n.logFile = filepath.Join(t.TempDir(), "cni.log")
	n.ipamDir = t.TempDir()
	return n
}

// newRuntime is a libcni runtime safe for concurrent use: libcni sets a
// missing exec lazily, which races when several ADDs start at once.
func newRuntime(path []string, cacheDir string) *libcni.CNIConfig {
	exec := &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}}
	return libcni.NewCNIConfigWithCacheDir(path, cacheDir, exec)
}

// inHost runs f on a thread inside the node's host netns; processes
// started from f (the plugins) inherit that namespace.
func (n *node) inHost(f func() error) {
	n.t.Helper()
	if err := n.hostNS.Do(func(ns.NetNS) error { return f() }); err != nil {
		n.t.Fatalf("in host netns: %v", err)
	}
}

// hostDo is inHost returning f's error instead of failing.
func (n *node) hostDo(f func() error) error {
	return n.hostNS.Do(func(ns.NetNS) error { return f() })
}

// netconf is the routed plugin's entry in a conflist.
type netconf map[string]any

// routedConf returns a routed-cni entry with host-local IPAM on subnet.
func (n *node) routedConf(subnet string) netconf {
	return netconf{
		"type":           "routed-cni",
		"etcd_endpoints": n.hostEP,
		"nodename":       n.name,
		"log_file_path":  n.logFile,
		"log_level":      "debug",
		"mtu_file":       filepath.Join(n.ipamDir, "no-mtu-file"),
		// Each test node is its own host, with its own host IPAM lock.
		"ipam_lock_file":    filepath.Join(n.ipamDir, "ipam.lock"),
		"etcd_ca_cert_file": n.tlsFile(func(p *testpki.PKI) string { return p.CAFile }),
		"etcd_cert_file":    n.tlsFile(func(p *testpki.PKI) string { return p.ClientCert }),
		"etcd_key_file":     n.tlsFile(func(p *testpki.PKI) string { return p.ClientKey }),
		"ipam": map[string]any{
			"type":    "host-local",
			"subnet":  subnet,
			"dataDir": n.ipamDir,
		},
	}
}

// tlsFile is one of etcd's TLS files, "" without TLS.
func (n *node) tlsFile(f func(*testpki.PKI) string) string {
	if n.pki == nil {
		return ""
	}
	return f(n.pki)
}

// confList builds a conflist of the given version from plugin entries.
func confList(t testing.TB, name, version string, plugins ...netconf) *libcni.NetworkConfigList {
	t.Helper()
	b, err := json.Marshal(map[string]any{"cniVersion": version, "name": name, "plugins": plugins})
	if err != nil {
		t.Fatal(err)
	}
	l, err := libcni.ConfListFromBytes(b)
	if err != nil {
		t.Fatalf("conflist: %v\n%s", err, b)
	}
	return l
}

// pod is one container attachment.
type pod struct {
	namespace, name, containerID, ifName string
	netns                                ns.NetNS
}

func newPod(t testing.TB, name string) *pod {
	return &pod{namespace: "default", name: name, containerID: strings.ToLower(randHex(16)), ifName: "eth0", netns: newNetNS(t)}
}

func (p *pod) rt() *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: p.containerID, NetNS: p.netns.Path(), IfName: p.ifName}
	if p.name != "" {
		rt.Args = [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", p.namespace}, {"K8S_POD_NAME", p.name}, {"K8S_POD_INFRA_CONTAINER_ID", p.containerID}}
	}
	return rt
}

// add runs ADD for the list in the host netns.
func (n *node) add(l *libcni.NetworkConfigList, rt *libcni.RuntimeConf) (types.Result, error) {
	var res types.Result
	err := n.hostDo(func() error {
		var err error
		res, err = n.cni.AddNetworkList(context.Background(), l, rt)
		return err
	})
	return res, err
}

func (n *node) del(l *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.hostDo(func() error { return n.cni.DelNetworkList(context.Background(), l, rt) })
}

func (n *node) check(l *libcni.NetworkConfigList, rt *libcni.RuntimeConf) error {
	return n.hostDo(func() error { return n.cni.CheckNetworkList(context.Background(), l, rt) })
}

// mustAdd runs ADD and returns the result in the current version.
func (n *node) mustAdd(l *libcni.NetworkConfigList, rt *libcni.RuntimeConf) *current.Result {
	n.t.Helper()
	res, err := n.add(l, rt)
	if err != nil {
		n.t.Fatalf("ADD %s: %v\nlog:\n%s", rt.ContainerID, err, n.logTail())
	}
	cur, err := current.NewResultFromResult(res)
	if err != nil {
		n.t.Fatal(err)
	}
	return cur
}

func (n *node) logTail() string { return cnitest.LogTail(n.logFile) }

// hostLinkExists reports whether an interface exists in the host netns.
func (n *node) hostLinkExists(name string) bool {
	var found bool
	n.inHost(func() error {
		_, err := netlink.LinkByName(name)
		found = err == nil
		return nil
	})
	return found
}

// hostRoutes lists the host netns' main-table routes with dst ip/32 (or
// ip/128).
func (n *node) hostRoutes(ip net.IP) []netlink.Route {
	var out []netlink.Route
	family, dst := netlink.FAMILY_V4, &net.IPNet{IP: ip.To4(), Mask: net.CIDRMask(32, 32)}
	if ip.To4() == nil {
		family, dst = netlink.FAMILY_V6, &net.IPNet{IP: ip, Mask: net.CIDRMask(128, 128)}
	}
	n.inHost(func() error {
		rs, err := netlink.RouteListFiltered(family, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
		out = rs
		return err
	})
	return out
}

// caliLinks lists the host netns' interfaces whose name starts with cali.
func (n *node) caliLinks() []string {
	n.t.Helper()
	names, err := cnitest.CaliLinks(n.hostNS)
	if err != nil {
		n.t.Fatalf("in host netns: %v", err)
	}
	return names
}

// endpoints lists the WorkloadEndpoints in etcd.
func (n *node) endpoints() []*api.WorkloadEndpoint {
	n.t.Helper()
	list, _, err := n.store.List(context.Background(), api.KindWorkloadEndpoint)
	if err != nil {
		n.t.Fatal(err)
	}
	var out []*api.WorkloadEndpoint
	for _, r := range list {
		out = append(out, r.(*api.WorkloadEndpoint))
	}
	return out
}

// hostLocalAllocations lists the addresses host-local holds for network.
func (n *node) hostLocalAllocations(network string) []string {
	entries, _ := os.ReadDir(filepath.Join(n.ipamDir, network))
	var out []string
	for _, e := range entries {
		if net.ParseIP(e.Name()) != nil {
			out = append(out, e.Name())
		}
	}
	return out
}

// assertClean fails if anything of an attachment is left: veth, routes
// to its addresses, host-local allocations or endpoints.
func (n *node) assertClean(t testing.TB, network string, ips ...net.IP) {
	t.Helper()
	if l := n.caliLinks(); len(l) > 0 {
		t.Errorf("leaked host interfaces: %v", l)
	}
	for _, ip := range ips {
		for _, r := range n.hostRoutes(ip) {
			if r.Protocol == kernel.RouteProtocol {
				t.Errorf("leaked host route %v", r)
			}
		}
	}
	if a := n.hostLocalAllocations(network); len(a) > 0 {
		t.Errorf("leaked IPAM allocations: %v", a)
	}
	if w := n.endpoints(); len(w) > 0 {
		t.Errorf("leaked WorkloadEndpoints: %v", w[0].Metadata.Name)
	}
}

// inPod runs a command inside a pod's netns.
func inPod(p *pod, name string, args ...string) (string, error) {
	var out []byte
	err := p.netns.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return string(out), err
}

// hostCmd runs a command in the node's host netns.
func (n *node) hostCmd(name string, args ...string) (string, error) {
	var out []byte
	err := n.hostDo(func() error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	return string(out), err
}

func jsonMarshal(v any) ([]byte, error) { return json.MarshalIndent(v, "", "  ") }
