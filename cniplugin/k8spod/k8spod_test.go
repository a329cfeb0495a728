package k8spod

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/routed-net/routed/cniplugin/plugin"

	"github.com/routed-net/routed/pkg/api"
)

// apiServer is a fake API server serving a fixed set of objects over
// TLS, counting requests and checking the bearer token.
type apiServer struct {
	*httptest.Server
	objects  map[string]string // path -> JSON
	token    string
	status   int // forced answer code when non-zero
	requests atomic.Int32
}

func newAPIServer(t *testing.T, token string) *apiServer {
	a := &apiServer{objects: map[string]string{}, token: token}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		if a.status != 0 {
			w.WriteHeader(a.status)
			fmt.Fprintf(w, `{"kind":"Status","message":"forced %d"}`, a.status)
			return
		}
		if a.token != "" && r.Header.Get("Authorization") != "Bearer "+a.token {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"kind":"Status","message":"Unauthorized"}`)
			return
		}
		body, ok := a.objects[r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","message":"%s not found"}`, r.URL.Path)
			return
		}
		fmt.Fprint(w, body)
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *apiServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})
}

func (a *apiServer) addPod(ns, name string, labels, annots map[string]string) {
	o := map[string]any{"kind": "Pod", "metadata": map[string]any{"name": name, "namespace": ns, "labels": labels, "annotations": annots}}
	b, _ := json.Marshal(o)
	a.objects[podPath(ns, name)] = string(b)
}

func (a *apiServer) addNamespace(name string, annots map[string]string) {
	o := map[string]any{"kind": "Namespace", "metadata": map[string]any{"name": name, "annotations": annots}}
	b, _ := json.Marshal(o)
	a.objects[namespacePath(name)] = string(b)
}

// writeKubeconfig writes a kubeconfig with the given cluster and user
// entries (YAML fragments indented for their place).
func writeKubeconfig(t *testing.T, dir, cluster, user string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig")
	kc := "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n" + cluster +
		"users:\n- name: u\n  user:\n" + user +
		"contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n"
	if err := os.WriteFile(p, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func tokenKubeconfig(t *testing.T, a *apiServer) string {
	return writeKubeconfig(t, t.TempDir(),
		"    server: "+a.URL+"\n    certificate-authority-data: "+base64.StdEncoding.EncodeToString(a.caPEM())+"\n",
		"    token: "+a.token+"\n")
}

func code(err error) uint {
	var te *types.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

func TestPodLabelsTokenAndCache(t *testing.T) {
	a := newAPIServer(t, "s3cret")
	a.addPod("default", "web", map[string]string{"app": "web", "tier": "front"}, nil)
	s := NewSource()
	kc := tokenKubeconfig(t, a)
	for i := 0; i < 2; i++ {
		info, err := s.PodInfo(context.Background(), kc, "default", "web")
		if err != nil {
			t.Fatal(err)
		}
		l := info.Labels
		if len(l) != 2 || l["app"] != "web" || l["tier"] != "front" {
			t.Fatalf("labels %v", l)
		}
	}
	if n := a.requests.Load(); n != 1 {
		t.Errorf("%d requests, want 1 (cached)", n)
	}
}

func TestTokenFileCAFileAndRelativePaths(t *testing.T) {
	a := newAPIServer(t, "from-file")
	a.addPod("ns1", "p", map[string]string{"k": "v"}, nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), a.caPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc := writeKubeconfig(t, dir, "    server: "+a.URL+"\n    certificate-authority: ca.crt\n", "    tokenFile: token\n")
	info, err := NewSource().PodInfo(context.Background(), kc, "ns1", "p")
	if err != nil || info.Labels["k"] != "v" {
		t.Fatalf("pod %+v, %v", info, err)
	}
}

func TestClientCertificate(t *testing.T) {
	a := newAPIServer(t, "")
	a.addPod("default", "p", map[string]string{"k": "v"}, nil)
	// Require a client certificate; the server's own key pair serves as
	// one (the test only checks that it is presented).
	a.TLS.ClientAuth = tls.RequireAnyClientCert
	cert := a.TLS.Certificates[0]
	keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	b64 := base64.StdEncoding.EncodeToString
	kc := writeKubeconfig(t, t.TempDir(),
		"    server: "+a.URL+"\n    certificate-authority-data: "+b64(a.caPEM())+"\n",
		"    client-certificate-data: "+b64(certPEM)+"\n    client-key-data: "+b64(keyPEM)+"\n")
	if _, err := NewSource().PodInfo(context.Background(), kc, "default", "p"); err != nil {
		t.Fatalf("with client certificate: %v", err)
	}
	noCert := writeKubeconfig(t, t.TempDir(), "    server: "+a.URL+"\n    certificate-authority-data: "+b64(a.caPEM())+"\n", "    {}\n")
	if _, err := NewSource().PodInfo(context.Background(), noCert, "default", "p"); err == nil {
		t.Fatal("without client certificate: no error")
	}
}

func TestErrorCodes(t *testing.T) {
	a := newAPIServer(t, "tok")
	a.addPod("default", "p", nil, nil)
	kc := tokenKubeconfig(t, a)

	// A listener that is closed at once: connection refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	refusedKC := writeKubeconfig(t, t.TempDir(), "    server: https://"+refused+"\n    insecure-skip-tls-verify: true\n", "    token: x\n")
	untrustedKC := writeKubeconfig(t, t.TempDir(), "    server: "+a.URL+"\n", "    token: tok\n")
	wrongTokenKC := writeKubeconfig(t, t.TempDir(), "    server: "+a.URL+"\n    insecure-skip-tls-verify: true\n", "    token: wrong\n")
	execKC := writeKubeconfig(t, t.TempDir(), "    server: "+a.URL+"\n", "    exec:\n      command: foo\n")
	garbage := filepath.Join(t.TempDir(), "garbage")
	os.WriteFile(garbage, []byte("clusters: [unterminated"), 0o600)

	cases := []struct {
		name, kc, pod string
		status        int
		want          uint
		sentinel      error
		mention       string
	}{
		{"refused", refusedKC, "p", 0, 11, ErrUnavailable, "unreachable"},
		{"untrusted CA", untrustedKC, "p", 0, 7, ErrConfig, "certificate"},
		{"401", wrongTokenKC, "p", 0, 7, ErrConfig, "credentials"},
		{"403", kc, "p", 403, 7, ErrConfig, "routed-cni-plugin"},
		{"500", kc, "p", 500, 11, ErrUnavailable, "500"},
		{"429", kc, "p", 429, 11, ErrUnavailable, "429"},
		{"404", kc, "nope", 0, 999, ErrNotFound, "not found"},
		{"exec", execKC, "p", 0, 7, ErrConfig, "exec"},
		{"garbage", garbage, "p", 0, 7, ErrConfig, "YAML"},
		{"bad name", kc, "../x", 0, 7, ErrConfig, "not a Kubernetes pod name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a.status = c.status
			defer func() { a.status = 0 }()
			s := &Source{Timeout: 3 * time.Second}
			_, err := s.Pod(context.Background(), c.kc, "default", c.pod)
			if !errors.Is(err, c.sentinel) {
				t.Fatalf("error %v, want %v", err, c.sentinel)
			}
			cerr := CNIError(err)
			if code(cerr) != c.want || !strings.Contains(cerr.Error(), c.mention) {
				t.Fatalf("CNI error %v (code %d), want code %d mentioning %q", cerr, code(cerr), c.want, c.mention)
			}
		})
	}
}

func TestParseAnnotations(t *testing.T) {
	ok := []struct {
		annots map[string]string
		ip     string
		pools  []string
	}{
		{map[string]string{}, "", nil},
		{map[string]string{"cni.projectcalico.org/ipAddrs": `["10.244.1.5"]`}, "10.244.1.5", nil},
		{map[string]string{"routed.io/ipAddrs": ` ["10.244.1.6/32"] `}, "10.244.1.6", nil},
		{map[string]string{"routed.io/ipAddrs": `["10.0.0.1"]`, "cni.projectcalico.org/ipAddrs": `["10.0.0.1"]`}, "10.0.0.1", nil},
		{map[string]string{"cni.projectcalico.org/ipv4pools": `["pool-a","10.245.0.0/16"]`}, "", []string{"pool-a", "10.245.0.0/16"}},
		{map[string]string{"routed.io/ipv4pools": `["b"]`, "other/annotation": "x"}, "", []string{"b"}},
		{map[string]string{"cni.projectcalico.org/ipAddrs": `["10.244.1.5", "fd00:10::5"]`}, "[10.244.1.5 fd00:10::5]", nil},
		{map[string]string{"cni.projectcalico.org/ipAddrs": `["fd00:10::5/128"]`}, "fd00:10::5", nil},
		{map[string]string{"cni.projectcalico.org/ipv6pools": `["v6","fd00:10::/48"]`}, "", []string{"v6", "fd00:10::/48"}},
	}
	for _, c := range ok {
		ips, err := ParseIPAddrs(c.annots, "pod x")
		if err != nil {
			t.Fatalf("%v: %v", c.annots, err)
		}
		got := ""
		switch len(ips) {
		case 0:
		case 1:
			got = ips[0].String()
		default:
			got = fmt.Sprint(ips)
		}
		if got != c.ip {
			t.Errorf("%v: ips %v, want %q", c.annots, ips, c.ip)
		}
		v4, v6, err := ParsePools(c.annots, "pod x")
		if err != nil || fmt.Sprint(append(v4, v6...)) != fmt.Sprint(c.pools) {
			t.Errorf("%v: pools %v %v (%v), want %v", c.annots, v4, v6, err, c.pools)
		}
	}
	bad := []map[string]string{
		{"cni.projectcalico.org/ipAddrs": `10.244.1.5`},
		{"cni.projectcalico.org/ipAddrs": `["10.244.1.5"`},
		{"cni.projectcalico.org/ipAddrs": `[]`},
		{"cni.projectcalico.org/ipAddrs": `["10.0.0.1","10.0.0.2"]`},
		{"cni.projectcalico.org/ipAddrs": `["fd00::1", "fd00::2"]`},
		{"cni.projectcalico.org/ipAddrs": `["::ffff:10.0.0.1"]`},
		{"cni.projectcalico.org/ipv6pools": `["10.0.0.0/24"]`},
		{"cni.projectcalico.org/ipv4pools": `["fd00::/64"]`},
		{"cni.projectcalico.org/ipAddrs": `["10.0.0.0/24"]`},
		{"routed.io/ipAddrs": `["nope"]`},
		{"routed.io/ipAddrs": `["10.0.0.1"]`, "cni.projectcalico.org/ipAddrs": `["10.0.0.2"]`},
		{"cni.projectcalico.org/ipAddrsNoIpam": `["10.0.0.1"]`},
		{"cni.projectcalico.org/ipv4pools": `pool-a`},
		{"cni.projectcalico.org/ipv4pools": `[1]`},
		{"routed.io/ipv4pools": `[""]`},
		{"routed.io/ipv4pools": `["10.0.0.0/33"]`},
	}
	for _, a := range bad {
		_, err1 := ParseIPAddrs(a, "pod x")
		_, _, err2 := ParsePools(a, "pod x")
		err := errors.Join(err1, err2)
		if !errors.Is(err, ErrAnnotation) || code(CNIError(err1)) != 7 && code(CNIError(err2)) != 7 {
			t.Errorf("%v: %v, want a code 7 annotation error", a, err)
		}
	}
}

func TestApplyRequest(t *testing.T) {
	stdin := []byte(`{"cniVersion":"1.0.0","name":"n","type":"routed-cni","mtu":1400,"etcd_endpoints":"http://127.0.0.1:2379",
		"ipam":{"type":"routed-ipam","ipv4_pools":["default"],"gc_grace_seconds":5},"runtimeConfig":{"portMappings":[{"hostPort":80}]}}`)
	conf, err := plugin.ParseNetConf(stdin)
	if err != nil {
		t.Fatal(err)
	}
	ip, _ := ParseIPAddrs(map[string]string{"routed.io/ipAddrs": `["10.1.2.3", "fd00::3"]`}, "pod")
	out, err := applyRequest(stdin, conf, Request{IPs: ip, Pools4: []string{"b", "10.2.0.0/16"}, Pools6: []string{"v6"}}, "pod x")
	if err != nil {
		t.Fatal(err)
	}
	got, err := plugin.ParseNetConf(out)
	if err != nil {
		t.Fatalf("rewritten stdin does not parse: %v\n%s", err, out)
	}
	if fmt.Sprint(got.RuntimeConfig.IPs) != "[10.1.2.3 fd00::3]" || got.MTU != 1400 {
		t.Errorf("rewritten: %s", out)
	}
	var m struct {
		IPAM struct {
			Pools  []string `json:"ipv4_pools"`
			Pools6 []string `json:"ipv6_pools"`
			Grace  int      `json:"gc_grace_seconds"`
		} `json:"ipam"`
		RC map[string]json.RawMessage `json:"runtimeConfig"`
	}
	json.Unmarshal(out, &m)
	if fmt.Sprint(m.IPAM.Pools) != "[b 10.2.0.0/16]" || fmt.Sprint(m.IPAM.Pools6) != "[v6]" || m.IPAM.Grace != 5 || m.RC["portMappings"] == nil {
		t.Errorf("rewritten: %s", out)
	}

	// A different fixed IP from the runtime is a conflict.
	withIPs := []byte(`{"cniVersion":"1.0.0","name":"n","type":"routed-cni","etcd_endpoints":"http://127.0.0.1:2379","ipam":{"type":"routed-ipam"},"runtimeConfig":{"ips":["10.9.9.9"]}}`)
	conf, _ = plugin.ParseNetConf(withIPs)
	if _, err := applyRequest(withIPs, conf, Request{IPs: ip}, "pod x"); !errors.Is(err, ErrAnnotation) {
		t.Errorf("conflicting runtimeConfig.ips: %v", err)
	}
}

// TestFuncsAdd drives the ADD hook with a stand-in for the plugin's ADD.
func TestFuncsAdd(t *testing.T) {
	a := newAPIServer(t, "tok")
	a.addPod("default", "fixed", nil, map[string]string{"cni.projectcalico.org/ipAddrs": `["10.244.1.5"]`})
	a.addPod("default", "plain", nil, nil)
	a.addPod("default", "broken", nil, map[string]string{"cni.projectcalico.org/ipAddrs": `{oops`})
	a.addPod("default", "v6pods", nil, map[string]string{"cni.projectcalico.org/ipv6pools": `["pod-v6"]`})
	a.addNamespace("default", map[string]string{"routed.io/ipv4pools": `["ns-pool"]`})
	kc := tokenKubeconfig(t, a)
	logFile := filepath.Join(t.TempDir(), "cni.log")
	conf := func(kubeconfig string) []byte {
		return []byte(`{"cniVersion":"1.0.0","name":"n","type":"routed-cni","etcd_endpoints":"http://127.0.0.1:2379","nodename":"n1",
			"log_file_path":"` + logFile + `","ipam":{"type":"routed-ipam"},"kubernetes":{"kubeconfig":"` + kubeconfig + `"}}`)
	}
	run := func(stdin []byte, pod string) ([]byte, error) {
		var seen []byte
		next := func(args *skel.CmdArgs) error { seen = args.StdinData; return nil }
		s := NewSource()
		err := s.add(&skel.CmdArgs{ContainerID: "c1", StdinData: stdin, Args: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + pod}, next)
		return seen, err
	}

	seen, err := run(conf(kc), "fixed")
	if err != nil || !strings.Contains(string(seen), `"ips":["10.244.1.5"]`) || !strings.Contains(string(seen), `"ipv4_pools":["ns-pool"]`) {
		t.Fatalf("fixed: %v\n%s", err, seen)
	}
	seen, err = run(conf(kc), "plain")
	if err != nil || !strings.Contains(string(seen), `"ipv4_pools":["ns-pool"]`) || strings.Contains(string(seen), `"ips"`) {
		t.Fatalf("plain: %v\n%s", err, seen)
	}
	// Each family falls back to the namespace on its own: the pod's IPv6
	// pools, the namespace's IPv4 pools.
	seen, err = run(conf(kc), "v6pods")
	if err != nil || !strings.Contains(string(seen), `"ipv4_pools":["ns-pool"]`) || !strings.Contains(string(seen), `"ipv6_pools":["pod-v6"]`) {
		t.Fatalf("v6pods: %v\n%s", err, seen)
	}
	seen, err = run(conf(kc), "broken")
	if code(err) != 7 || seen != nil {
		t.Fatalf("broken: %v (code %d), plugin ADD ran: %v", err, code(err), seen != nil)
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "ipAddrs") {
		t.Errorf("the failure is not in the log:\n%s", b)
	}
	// A kubeconfig that does not exist leaves stdin as it was.
	missingConf := conf(filepath.Join(t.TempDir(), "absent"))
	seen, err = run(missingConf, "plain")
	if err != nil || string(seen) != string(missingConf) {
		t.Fatalf("missing kubeconfig: %v\n%s", err, seen)
	}
}

// TestPodInfoServiceAccountAndPorts: the endpoint's service account and
// ports come from the pod's spec as Calico takes them: named or
// host-mapped container ports of containers and init containers, TCP by
// default, ports of protocols policy cannot name left out.
func TestPodInfoServiceAccountAndPorts(t *testing.T) {
	a := newAPIServer(t, "s3cret")
	a.objects[podPath("shop", "web")] = `{"kind":"Pod","metadata":{"name":"web","namespace":"shop","labels":{"app":"web"}},
	 "spec":{"serviceAccountName":"frontend",
	  "containers":[{"name":"c","ports":[{"name":"http","containerPort":8080},{"containerPort":9090},
	     {"name":"dns","containerPort":53,"protocol":"UDP"},{"containerPort":7000,"hostPort":30070,"hostIP":"10.0.0.5","protocol":"SCTP"},
	     {"name":"odd","containerPort":1,"protocol":"FOO"}]}],
	  "initContainers":[{"name":"i","ports":[{"name":"metrics","containerPort":9100,"protocol":"TCP"}]}]}}`
	info, err := NewSource().PodInfo(context.Background(), tokenKubeconfig(t, a), "shop", "web")
	if err != nil {
		t.Fatal(err)
	}
	if info.ServiceAccount != "frontend" || info.Labels["app"] != "web" {
		t.Errorf("pod info %+v", info)
	}
	want := []api.WorkloadEndpointPort{
		{Name: "http", Protocol: api.ProtocolFromName("TCP"), Port: 8080},
		{Name: "dns", Protocol: api.ProtocolFromName("UDP"), Port: 53},
		{Protocol: api.ProtocolFromName("SCTP"), Port: 7000, HostPort: 30070, HostIP: "10.0.0.5"},
		{Name: "metrics", Protocol: api.ProtocolFromName("TCP"), Port: 9100},
	}
	if !reflect.DeepEqual(info.Ports, want) {
		t.Errorf("ports\n got %+v\nwant %+v", info.Ports, want)
	}
}
