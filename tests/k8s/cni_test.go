package k8s_test

import (
	"context"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/routed/cnitoken"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// k8s wraps the admin's REST calls for the objects the tests create.
type k8s struct {
	t   *testing.T
	srv *kubeapiserver.Server
}

func (k k8s) create(path string, obj map[string]any) {
	k.t.Helper()
	code, body, err := k.srv.Do(context.Background(), http.MethodPost, path, obj)
	if err != nil || code != http.StatusCreated {
		k.t.Fatalf("POST %s: %v %d %s", path, err, code, body)
	}
}

// namespace creates a namespace (with its default ServiceAccount, which
// pod admission wants and no controller manager creates here).
func (k k8s) namespace(name string, annots map[string]string) {
	k.create("/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name, "annotations": annots}})
	k.create("/api/v1/namespaces/"+name+"/serviceaccounts", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": "default"}})
}

func (k k8s) pod(ns, name string, labels, annots map[string]string) {
	k.create("/api/v1/namespaces/"+ns+"/pods", map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "labels": labels, "annotations": annots},
		"spec": map[string]any{"automountServiceAccountToken": false,
			"containers": []any{map[string]any{"name": "c", "image": "registry.k8s.io/pause:3.10"}}}})
}

// expectStatus checks what a token may do.
func (k k8s) expectStatus(token, path string, want int) {
	k.t.Helper()
	code, body, err := k.srv.DoAs(context.Background(), token, http.MethodGet, path, nil)
	if err != nil || code != want {
		k.t.Errorf("GET %s: %v %d, want %d: %.200s", path, err, code, want, body)
	}
}

// TestCNIPodSource drives routed-cni through libcni, installed on a
// netns "node" by the real installer from the DaemonSet spec, against
// pods in the real API server read with the routed-cni-plugin account
// and RBAC of deploy/routed.yaml.
func TestCNIPodSource(t *testing.T) {
	srv := cluster(t)
	requireRoot(t)
	ctx := context.Background()
	k := k8s{t, srv}

	// RBAC and accounts exactly as deploy/routed.yaml has them.
	nodeToken := applyRouted(t, srv)

	n := newNode(t, srv)
	n.install()
	// routed on the node writes the plugin's kubeconfig with a
	// TokenRequest token (TestCNIToken covers its refresh).
	var token string
	kubeconfig := filepath.Join(n.netDir, "routed-kubeconfig")
	runCNIToken(t, srv, nodeToken, kubeconfig, "https://"+n.apiAddr, cnitoken.DefaultValidity, cnitoken.DefaultRefreshBefore)
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		var err error
		if token, _, err = kubeconfigToken(kubeconfig); err != nil {
			return "routed wrote no kubeconfig: " + err.Error()
		}
		return ""
	})
	n.createPool("pool-a", "10.244.0.0/16")
	n.createPool("pool-b", "10.245.0.0/16")
	conf := n.conflist("")
	poolA, poolB := netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")

	ns1, ns2 := "cni-"+randHex(3), "cni-pools-"+randHex(3)
	k.namespace(ns1, nil)
	k.namespace(ns2, map[string]string{"cni.projectcalico.org/ipv4pools": `["pool-b"]`})

	// Least privilege, checked by the API server.
	k.pod(ns1, "probe", nil, nil)
	k.expectStatus(token, "/api/v1/namespaces/"+ns1+"/pods/probe", http.StatusOK)
	k.expectStatus(token, "/api/v1/namespaces/"+ns1, http.StatusOK)
	k.expectStatus(token, "/api/v1/namespaces/"+ns1+"/pods", http.StatusForbidden)
	k.expectStatus(token, "/api/v1/pods", http.StatusForbidden)
	k.expectStatus(token, "/api/v1/namespaces/kube-system/secrets", http.StatusForbidden)
	k.expectStatus(token, "/api/v1/namespaces/kube-system/secrets/routed-cni-plugin-token", http.StatusForbidden)
	k.expectStatus(nodeToken, "/api/v1/nodes", http.StatusOK)
	k.expectStatus(nodeToken, "/api/v1/namespaces/"+ns1+"/pods/probe", http.StatusForbidden)

	type want struct {
		ip     string       // exact address, or
		in     netip.Prefix // a pool's range
		labels map[string]string
	}
	good := []struct {
		name, ns      string
		labels, annot map[string]string
		want          want
	}{
		{"labelled", ns1, map[string]string{"app": "web", "tier": "frontend", "routed.io/team": "net"}, nil,
			want{in: poolA, labels: map[string]string{"app": "web", "tier": "frontend", "routed.io/team": "net"}}},
		{"fixed-calico", ns1, map[string]string{"app": "db"}, map[string]string{"cni.projectcalico.org/ipAddrs": `["10.244.7.9"]`},
			want{ip: "10.244.7.9", labels: map[string]string{"app": "db"}}},
		{"fixed-routed", ns1, nil, map[string]string{"routed.io/ipAddrs": `["10.244.7.10"]`},
			want{ip: "10.244.7.10"}},
		{"pool-by-name", ns1, nil, map[string]string{"routed.io/ipv4pools": `["pool-b"]`},
			want{in: poolB}},
		{"pool-by-cidr", ns1, nil, map[string]string{"cni.projectcalico.org/ipv4pools": `["10.245.0.0/16"]`},
			want{in: poolB}},
		{"pool-from-namespace", ns2, nil, nil,
			want{in: poolB}},
		{"pod-overrides-namespace", ns2, nil, map[string]string{"routed.io/ipv4pools": `["pool-a"]`},
			want{in: poolA}},
	}
	added := map[string]*sandbox{}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			k.pod(c.ns, c.name, c.labels, c.annot)
			s := n.sandbox(c.ns, c.name)
			res, err := n.add(conf, s)
			if err != nil {
				t.Fatalf("ADD: %v\nlog:\n%s", err, n.logTail())
			}
			added[c.name] = s
			r, err := current.NewResultFromResult(res)
			if err != nil || len(r.IPs) != 1 {
				t.Fatalf("result %v (%v)", res, err)
			}
			ip, _ := netip.AddrFromSlice(r.IPs[0].Address.IP.To4())
			if (c.want.ip != "" && ip.String() != c.want.ip) || (c.want.ip == "" && !c.want.in.Contains(ip)) {
				t.Errorf("got %s, want %s%s", ip, c.want.ip, c.want.in)
			}
			w := n.endpoints()[c.name]
			if w == nil {
				t.Fatalf("no WorkloadEndpoint for pod %s", c.name)
			}
			// The pod's labels plus the three Calico sets on every k8s
			// endpoint, which policy selectors match on.
			wantLabels := map[string]string{
				"projectcalico.org/namespace":      c.ns,
				"projectcalico.org/orchestrator":   "k8s",
				"projectcalico.org/serviceaccount": "default",
			}
			for k, v := range c.want.labels {
				wantLabels[k] = v
			}
			if !reflect.DeepEqual(w.Metadata.Labels, wantLabels) {
				t.Errorf("WorkloadEndpoint labels %v, want the pod's plus Calico's %v", w.Metadata.Labels, wantLabels)
			}
			if len(w.Spec.IPNetworks) != 1 || w.Spec.IPNetworks[0] != ip.String()+"/32" {
				t.Errorf("WorkloadEndpoint ipNetworks %v, want %s/32", w.Spec.IPNetworks, ip)
			}
		})
	}
	if t.Failed() {
		return
	}

	// Failures: the right code, a message naming the problem, and nothing
	// left behind - no interface, endpoint or address.
	deny := filepath.Join(t.TempDir(), "deny-kubeconfig")
	otherToken := mustToken(t, k, srv, "routed-test-nobody")
	os.WriteFile(deny, srv.Kubeconfig("https://"+n.apiAddr, otherToken), 0o600)
	down := filepath.Join(t.TempDir(), "down-kubeconfig")
	os.WriteFile(down, srv.Kubeconfig("https://127.0.0.1:1", token), 0o600)

	bad := []struct {
		name       string
		annot      map[string]string
		noPod      bool
		kubeconfig string
		code       uint
		mention    string
	}{
		{"ipaddrs-not-json", map[string]string{"cni.projectcalico.org/ipAddrs": `10.244.1.5`}, false, "", 7, "ipAddrs"},
		{"ipaddrs-two", map[string]string{"routed.io/ipAddrs": `["10.244.1.5","10.244.1.6"]`}, false, "", 7, "one address per family"},
		// No IPv6 pool exists here: the IPv6 address is in none.
		{"ipaddrs-v6", map[string]string{"routed.io/ipAddrs": `["fd00::5"]`}, false, "", 7, "fd00::5"},
		{"ipaddrs-outside-pools", map[string]string{"routed.io/ipAddrs": `["172.31.0.5"]`}, false, "", 7, "172.31.0.5"},
		{"pools-not-json", map[string]string{"routed.io/ipv4pools": `["pool-b"`}, false, "", 7, "ipv4pools"},
		{"pools-unknown", map[string]string{"cni.projectcalico.org/ipv4pools": `["no-such-pool"]`}, false, "", 7, "no-such-pool"},
		{"prefixes-disagree", map[string]string{"routed.io/ipv4pools": `["pool-a"]`, "cni.projectcalico.org/ipv4pools": `["pool-b"]`}, false, "", 7, "remove one"},
		{"pod-missing", nil, true, "", 999, "not found"},
		{"forbidden", nil, false, deny, 7, "routed-cni-plugin"},
		{"apiserver-down", nil, false, down, 11, "unreachable"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			if !c.noPod {
				k.pod(ns1, c.name, map[string]string{"app": "bad"}, c.annot)
			}
			before, links := n.inUse(), len(n.caliLinks())
			s := n.sandbox(ns1, c.name)
			l := conf
			if c.kubeconfig != "" {
				l = n.conflist(c.kubeconfig)
			}
			_, err := n.add(l, s)
			if err == nil {
				added[c.name] = s
				t.Fatalf("ADD succeeded, want code %d", c.code)
			}
			if cniCode(err) != c.code || !strings.Contains(err.Error(), c.mention) {
				t.Errorf("ADD: %v (code %d), want code %d mentioning %q", err, cniCode(err), c.code, c.mention)
			}
			if got := n.inUse(); got != before {
				t.Errorf("%d addresses allocated, %d before: the failed ADD leaked", got, before)
			}
			held, _ := ipam.New(n.store).IPsByHandle(ctx, ipam.PodHandle(conf.Name, s.containerID))
			if len(held) > 0 {
				t.Errorf("handle still holds %v", held)
			}
			if got := len(n.caliLinks()); got != links {
				t.Errorf("%d host interfaces, %d before", got, links)
			}
			if w := n.endpoints()[c.name]; w != nil {
				t.Errorf("WorkloadEndpoint %s left behind", w.Metadata.Name)
			}
			t.Logf("code %d: %v", cniCode(err), err)
		})
	}

	for name, s := range added {
		if err := n.del(conf, s); err != nil {
			t.Errorf("DEL %s: %v", name, err)
		}
	}
	if u := n.inUse(); u != 0 {
		t.Errorf("%d addresses still allocated after DEL", u)
	}
	if l := n.caliLinks(); len(l) != 0 {
		t.Errorf("host interfaces left after DEL: %v", l)
	}
	if w := n.endpoints(); len(w) != 0 {
		t.Errorf("%d WorkloadEndpoints left after DEL", len(w))
	}
}

// mustToken creates a ServiceAccount with no role in kube-system and
// returns a token for it.
func mustToken(t *testing.T, k k8s, srv *kubeapiserver.Server, name string) string {
	t.Helper()
	code, _, err := srv.Do(context.Background(), http.MethodGet, "/api/v1/namespaces/kube-system/serviceaccounts/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code == http.StatusNotFound {
		k.create("/api/v1/namespaces/kube-system/serviceaccounts", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": name}})
	}
	tok, err := srv.ServiceAccountToken(context.Background(), "kube-system", name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
