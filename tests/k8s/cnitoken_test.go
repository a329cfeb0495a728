package k8s_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	"sigs.k8s.io/yaml"

	"github.com/routed-net/routed/cniplugin/k8spod"
	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/routed/cnitoken"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/testbin"
)

// applyRouted applies deploy/routed.yaml (its accounts and RBAC) and
// returns a token of the routed-node account, routed's identity.
func applyRouted(t *testing.T, srv *kubeapiserver.Server) string {
	t.Helper()
	if out, stderr, err := kubectl(t, srv, "apply", "--validate=strict", "-f", deployPath("routed.yaml")); err != nil {
		t.Fatalf("kubectl apply routed.yaml: %v\n%s%s", err, out, stderr)
	}
	tok, err := srv.ServiceAccountToken(context.Background(), "kube-system", "routed-node")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// runCNIToken runs routed's CNI token refresher as routed does on a
// node: with the routed-node account's identity (nodeToken), writing
// path with server as the API server the plugin reaches. It stops at
// the test's end.
func runCNIToken(t *testing.T, srv *kubeapiserver.Server, nodeToken, path, server string, validity, refreshBefore time.Duration) {
	t.Helper()
	cfg := cnitokenConfig(t, srv, nodeToken)
	cfg.Path, cfg.Server, cfg.CAData = path, server, srv.CAPEM
	cfg.Validity, cfg.RefreshBefore = validity, refreshBefore
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cnitoken.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("cnitoken.Run: %v", err)
		}
	})
}

// cnitokenConfig is a refresher configuration for the routed-cni-plugin
// account, acting with nodeToken.
func cnitokenConfig(t *testing.T, srv *kubeapiserver.Server, nodeToken string) cnitoken.Config {
	t.Helper()
	client, err := cnitoken.NewClient(cnitoken.ClientConfig{Server: srv.URL, CAData: srv.CAPEM, Token: nodeToken})
	if err != nil {
		t.Fatal(err)
	}
	return cnitoken.Config{Client: client, Namespace: "kube-system", ServiceAccount: "routed-cni-plugin"}
}

// claims is what the tests read of a service account token.
type claims struct {
	Sub        string `json:"sub"`
	Iat        int64  `json:"iat"`
	Exp        int64  `json:"exp"`
	Kubernetes struct {
		Pod *struct {
			Name string `json:"name"`
		} `json:"pod"`
	} `json:"kubernetes.io"`
}

// kubeconfigToken reads the bearer token of a kubeconfig file and
// decodes its claims (the JWT payload; the API server checks the
// signature whenever the token is used).
func kubeconfigToken(path string) (string, claims, error) {
	var c claims
	b, err := os.ReadFile(path)
	if err != nil {
		return "", c, err
	}
	var kc struct {
		Users []struct {
			User struct {
				Token string `json:"token"`
			} `json:"user"`
		} `json:"users"`
	}
	if err := yaml.Unmarshal(b, &kc); err != nil || len(kc.Users) != 1 {
		return "", c, errors.New("not a kubeconfig with one user: " + string(b))
	}
	tok := kc.Users[0].User.Token
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", c, errors.New("token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", c, err
	}
	return tok, c, json.Unmarshal(payload, &c)
}

// TestCNIToken runs routed's CNI token refresher (routed/cnitoken)
// against the real API server with the RBAC of deploy/routed.yaml: the
// plugin's kubeconfig appears with a TokenRequest token of
// routed-cni-plugin that expires, the plugin's own client reads pods
// with it, routed-node can get tokens for that account only, and the
// file gets a new token before the old one expires.
func TestCNIToken(t *testing.T) {
	srv := cluster(t)
	ctx := context.Background()
	k := k8s{t, srv}
	nodeToken := applyRouted(t, srv)

	// routed-node may create tokens for routed-cni-plugin in kube-system
	// and for nothing else.
	req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 600}}
	for path, want := range map[string]int{
		"/api/v1/namespaces/kube-system/serviceaccounts/routed-cni-plugin/token": http.StatusCreated,
		"/api/v1/namespaces/kube-system/serviceaccounts/routed-node/token":       http.StatusForbidden,
		"/api/v1/namespaces/kube-system/serviceaccounts/default/token":           http.StatusForbidden,
		"/api/v1/namespaces/default/serviceaccounts/routed-cni-plugin/token":     http.StatusForbidden,
	} {
		code, body, err := srv.DoAs(ctx, nodeToken, http.MethodPost, path, req)
		if err != nil || code != want {
			t.Errorf("routed-node POST %s: %v %d, want %d: %.200s", path, err, code, want, body)
		}
	}
	k.expectStatus(nodeToken, "/api/v1/namespaces/kube-system/secrets", http.StatusForbidden)
	// The refresher says which grant is missing.
	other := cnitokenConfig(t, srv, nodeToken)
	other.ServiceAccount, other.Validity = "routed-node", cnitoken.MinValidity
	if _, err := other.Request(ctx); !errors.Is(err, cnitoken.ErrRequest) || !strings.Contains(err.Error(), "routed-node-cni-token") {
		t.Errorf("token for routed-node as routed-node: %v, want ErrRequest naming the Role routed-node-cni-token", err)
	}

	// The shortest token the API server issues, refreshed once less
	// than validity-4s is left: a new one about every 4 s.
	const validity = cnitoken.MinValidity
	path := filepath.Join(t.TempDir(), "routed-kubeconfig")
	start := time.Now()
	runCNIToken(t, srv, nodeToken, path, srv.URL, validity, validity-4*time.Second)

	var (
		first       string
		firstClaims claims
		err         error
	)
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		first, firstClaims, err = kubeconfigToken(path)
		if err != nil {
			return "no kubeconfig with a token yet: " + err.Error()
		}
		return ""
	})
	st, err := os.Lstat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig %s: %v %v, want a regular file of mode 0600", path, st.Mode(), err)
	}
	c := firstClaims
	if c.Sub != "system:serviceaccount:kube-system:routed-cni-plugin" {
		t.Errorf("token subject %q, want the routed-cni-plugin ServiceAccount", c.Sub)
	}
	if life := time.Duration(c.Exp-c.Iat) * time.Second; life != validity {
		t.Errorf("token lifetime (exp-iat) %s, want %s", life, validity)
	}
	if exp := time.Unix(c.Exp, 0); exp.Before(start) || exp.After(start.Add(validity+time.Minute)) {
		t.Errorf("token expires at %s, want about %s after %s", exp, validity, start)
	}
	if c.Kubernetes.Pod != nil {
		t.Errorf("token bound to pod %s: it must outlive routed's pod", c.Kubernetes.Pod.Name)
	}

	// The plugin's own API client reads pods with it.
	ns := "cnitoken-" + randHex(3)
	k.namespace(ns, nil)
	k.pod(ns, "web", map[string]string{"app": "web"}, nil)
	pod, err := k8spod.NewSource().Pod(ctx, path, ns, "web")
	if err != nil || pod.Metadata.Labels["app"] != "web" {
		t.Fatalf("routed-cni's client with the refreshed kubeconfig: %v %+v", err, pod)
	}

	// A new token replaces the old one well before the old one expires.
	var second string
	var secondClaims claims
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		second, secondClaims, err = kubeconfigToken(path)
		if err != nil {
			return "kubeconfig unreadable while being refreshed: " + err.Error()
		}
		if second == first {
			return "the kubeconfig still holds the first token"
		}
		return ""
	})
	if now := time.Now(); !now.Before(time.Unix(firstClaims.Exp, 0)) {
		t.Errorf("refreshed at %s, after the old token expired (%s)", now, time.Unix(firstClaims.Exp, 0))
	}
	if secondClaims.Exp <= firstClaims.Exp || secondClaims.Sub != firstClaims.Sub {
		t.Errorf("new token: exp %d sub %s, old exp %d sub %s", secondClaims.Exp, secondClaims.Sub, firstClaims.Exp, firstClaims.Sub)
	}
	t.Logf("first token written %s after start, replaced %s after it was issued", time.Unix(firstClaims.Iat, 0).Sub(start).Round(100*time.Millisecond), time.Unix(secondClaims.Iat, 0).Sub(time.Unix(firstClaims.Iat, 0)))
	if _, err := k8spod.NewSource().Pod(ctx, path, ns, "web"); err != nil {
		t.Errorf("routed-cni's client with the new token: %v", err)
	}
}

// TestRoutedWritesCNIKubeconfig runs the routed binary as the DaemonSet
// does (ROUTED_CNI_KUBECONFIG, the pod's token, CA and namespace at the
// in-cluster path, KUBERNETES_SERVICE_HOST/PORT) on a netns node with
// its own mount namespace, and checks the kubeconfig it writes: the
// routed-cni-plugin account's token, the service address and the
// cluster CA.
func TestRoutedWritesCNIKubeconfig(t *testing.T) {
	srv := cluster(t)
	requireRoot(t)
	nodeToken := applyRouted(t, srv)
	n := newNode(t, srv)

	// What kubelet projects into the routed container (volume
	// routed-node-token); mounted in place below, in a tmpfs over /run
	// that only routed's mount namespace sees.
	sa := t.TempDir()
	for name, body := range map[string][]byte{"token": []byte(nodeToken), "ca.crt": srv.CAPEM, "namespace": []byte("kube-system")} {
		if err := os.WriteFile(filepath.Join(sa, name), body, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	state := t.TempDir()
	kubeconfig := filepath.Join(n.netDir, "routed-kubeconfig")
	script := `mount -t tmpfs routed-test /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount &&
cp "$SA"/token "$SA"/ca.crt "$SA"/namespace /run/secrets/kubernetes.io/serviceaccount/ &&
exec "$ROUTED" --nodename "$NODE" --ip 10.77.0.1/24 --no-default-ipv4-pool --ipam-gc-interval 0 \
  --state-dir "$STATE" --status-socket "$STATE/routed.sock" --health-listen "" --metrics-listen ""`
	cmd := exec.Command("nsenter", "--net="+n.hostNS.Path(), "--", "unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script)
	logf, err := os.Create(filepath.Join(state, "routed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "SA=" + sa, "ROUTED=" + testbin.Path(t, "routed"), "NODE=" + n.name, "STATE=" + state,
		"ETCD_ENDPOINTS=" + n.etcdEP, "ROUTED_CNI_KUBECONFIG=" + kubeconfig,
		"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=" + portOf(n.apiAddr)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("routed's log:\n%s", b)
		}
	})

	var token string
	var c claims
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		select {
		case err := <-exited:
			exited <- err
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("routed exited: %v\n%s", err, b)
		default:
		}
		if token, c, err = kubeconfigToken(kubeconfig); err != nil {
			return "routed wrote no CNI kubeconfig: " + err.Error()
		}
		return ""
	})
	if c.Sub != "system:serviceaccount:kube-system:routed-cni-plugin" || time.Duration(c.Exp-c.Iat)*time.Second != cnitoken.DefaultValidity {
		t.Errorf("token of %q valid %ds, want routed-cni-plugin's for %s", c.Sub, c.Exp-c.Iat, cnitoken.DefaultValidity)
	}
	b, _ := os.ReadFile(kubeconfig)
	if want := string(cnitoken.Kubeconfig("https://"+n.apiAddr, srv.CAPEM, token)); string(b) != want {
		t.Errorf("kubeconfig:\n%s\nwant:\n%s", b, want)
	}
	k := k8s{t, srv}
	k.expectStatus(token, "/api/v1/namespaces/kube-system", http.StatusOK)
	k.expectStatus(token, "/api/v1/namespaces/kube-system/secrets", http.StatusForbidden)
}

// TestCNITokenRetriesUntilGranted: a refresher whose identity may not
// yet create the token (RBAC not applied, API server refusing) writes
// nothing, keeps retrying with backoff, and writes the kubeconfig once
// the grant exists.
func TestCNITokenRetriesUntilGranted(t *testing.T) {
	srv := cluster(t)
	applyRouted(t, srv)
	k := k8s{t, srv}
	name := "routed-test-late-" + randHex(3)
	identity := mustToken(t, k, srv, name)

	cfg := cnitokenConfig(t, srv, identity)
	cfg.Path, cfg.Server, cfg.CAData = filepath.Join(t.TempDir(), "routed-kubeconfig"), srv.URL, srv.CAPEM
	cfg.MinRetry, cfg.MaxRetry = 100*time.Millisecond, time.Second
	failures := make(chan struct{}, 1)
	hook := &failureHook{ch: failures}
	cfg.Log = logrus.New().WithField("test", t.Name())
	cfg.Log.(*logrus.Entry).Logger.AddHook(hook)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cnitoken.Run(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })

	// Refused first: the error is logged and nothing is written.
	select {
	case <-failures:
	case <-time.After(30 * time.Second):
		t.Fatal("no failed token request logged without the grant")
	}
	if _, err := os.Lstat(cfg.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("kubeconfig written without a token: %v", err)
	}
	// Granted: the next retry writes it.
	k.create("/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings", map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
		"metadata": map[string]any{"name": name},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "routed-node-cni-token"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}},
	})
	t.Cleanup(func() {
		srv.Do(context.Background(), http.MethodDelete, "/apis/rbac.authorization.k8s.io/v1/namespaces/kube-system/rolebindings/"+name, nil)
	})
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() string {
		if _, c, err := kubeconfigToken(cfg.Path); err != nil || c.Sub != "system:serviceaccount:kube-system:routed-cni-plugin" {
			return fmt.Sprintf("no kubeconfig with routed-cni-plugin's token after the grant: %v %q", err, c.Sub)
		}
		return ""
	})
}

// failureHook signals each error the refresher logs.
type failureHook struct{ ch chan struct{} }

func (h *failureHook) Levels() []logrus.Level { return []logrus.Level{logrus.ErrorLevel} }

func (h *failureHook) Fire(*logrus.Entry) error {
	select {
	case h.ch <- struct{}{}:
	default:
	}
	return nil
}
