package kubeapiserver

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// Config says how to run the server.
type Config struct {
	// Binary is the kube-apiserver executable (Build's result).
	Binary string
	// Dir holds certificates, keys, the token file, kubeconfigs and the
	// server's log; the caller removes it.
	Dir string
	// EtcdServers are the etcd client URLs (http).
	EtcdServers []string
	// Advertise, when valid, is the address a cluster's nodes reach the
	// server at: it listens on every address, puts Advertise in its
	// certificate and in the "kubernetes" Service's endpoints (kept by
	// the lease reconciler), for kubelets and kube-proxy. Otherwise it
	// serves on 127.0.0.1 only, with no endpoints for that Service.
	Advertise netip.Addr
}

// Server is a running kube-apiserver on 127.0.0.1 with RBAC and an
// admin token (group system:masters).
type Server struct {
	// URL is https://127.0.0.1:PORT.
	URL string
	// Port is the secure port.
	Port int
	// CAPEM is the CA that signed the serving certificate.
	CAPEM []byte
	// AdminToken authenticates as "routed-test-admin" in system:masters.
	AdminToken string
	// AdminKubeconfig is a kubeconfig file for the admin.
	AdminKubeconfig string
	// LogPath is the server's stdout and stderr.
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
	client *http.Client
}

// Start writes certificates and keys, starts kube-apiserver on a free
// loopback port and waits until it is ready and its bootstrap objects
// (namespace kube-system, priority class system-node-critical) exist.
// Free ports can be taken between choosing and binding: a start that
// fails that way is retried on another port.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	files, err := writeCredentials(cfg.Dir, cfg.Advertise)
	if err != nil {
		return nil, fmt.Errorf("kubeapiserver: credentials: %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		s, err := start(ctx, cfg, files)
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

type credentials struct {
	caPEM                  []byte
	cert, key, tokens      string
	saPub, saKey, adminTok string
}

func start(ctx context.Context, cfg Config, files *credentials) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{
		URL:        "https://127.0.0.1:" + strconv.Itoa(port),
		Port:       port,
		CAPEM:      files.caPEM,
		AdminToken: files.adminTok,
		LogPath:    filepath.Join(cfg.Dir, "kube-apiserver.log"),
		exited:     make(chan struct{}),
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(files.caPEM)
	s.client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}

	args := []string{
		"--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + strings.Join(cfg.EtcdServers, ","),
		"--tls-cert-file=" + files.cert,
		"--tls-private-key-file=" + files.key,
		"--cert-dir=" + filepath.Join(cfg.Dir, "generated-certs"),
		"--token-auth-file=" + files.tokens,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + files.saPub,
		"--service-account-signing-key-file=" + files.saKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		// routed-node is privileged (see deploy/base/node.yaml); kubeadm
		// clusters allow that too.
		"--allow-privileged=true",
		"--enable-priority-and-fairness=false",
		"--profiling=false",
		"--v=1",
	}
	if cfg.Advertise.IsValid() {
		args = append(args, "--bind-address=0.0.0.0", "--advertise-address="+cfg.Advertise.String(),
			// Nodes have no DNS names here (kubectl exec, logs).
			"--kubelet-preferred-address-types=InternalIP")
	} else {
		// No nodes reach this server: nothing to reconcile the
		// "kubernetes" Service's endpoints to.
		args = append(args, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none")
	}
	logFile, err := os.Create(s.LogPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The server dies with the test binary, whatever ends it. The death
	// signal follows the OS thread that started the process, so that
	// thread is kept, locked, until the process is gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		logFile.Close()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		logFile.Close()
		return nil, fmt.Errorf("kubeapiserver: start %s: %w", cfg.Binary, err)
	}
	s.cmd = cmd

	if err := s.waitReady(ctx, 3*time.Minute); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%w\nlast lines of %s:\n%s", err, s.LogPath, tail(s.LogPath, 30))
	}
	s.AdminKubeconfig = filepath.Join(cfg.Dir, "admin.kubeconfig")
	if err := os.WriteFile(s.AdminKubeconfig, s.Kubeconfig(s.URL, s.AdminToken), 0o600); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady polls /readyz, then the bootstrap objects namespaced
// manifests and priority classes need, every 250 ms, all within limit;
// the server's exit ends the wait at once.
func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, path := range []string{"/readyz", "/api/v1/namespaces/kube-system", "/apis/scheduling.k8s.io/v1/priorityclasses/system-node-critical"} {
		var exited error
		err := testenv.Poll(ctx, time.Until(deadline), 250*time.Millisecond, func() (bool, string, error) {
			code, body, err := s.Do(ctx, http.MethodGet, path, nil)
			var last string
			switch {
			case err != nil:
				last = err.Error()
			case code != http.StatusOK:
				last = fmt.Sprintf("%d %s", code, firstLine(body))
			default:
				return true, "", nil
			}
			select {
			case <-s.exited:
				exited = fmt.Errorf("kubeapiserver: exited while starting (last answer to %s: %s)", path, last)
				return false, "", exited
			default:
			}
			return false, last, nil
		})
		switch {
		case err == nil:
		case exited != nil:
			return exited
		default:
			return fmt.Errorf("kubeapiserver: not ready within %s: GET %s: %w", limit, path, err)
		}
	}
	return nil
}

// Stop ends the server: SIGTERM, then SIGKILL after 10 s. Only the
// process Start started is signalled.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Do sends a request as the admin and returns the status code and body.
// body, when not nil, is sent as JSON.
func (s *Server) Do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	return s.DoAs(ctx, s.AdminToken, method, path, body)
}

// DoAs is Do with another bearer token.
func (s *Server) DoAs(ctx context.Context, token, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Kubeconfig returns a kubeconfig for server (the URL a client uses,
// which may be a relay's) with the server's CA and a bearer token.
func (s *Server) Kubeconfig(server, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: test
  user:
    token: %q
contexts:
- name: test
  context: {cluster: test, user: test}
current-context: test
`, server, base64.StdEncoding.EncodeToString(s.CAPEM), token))
}

// ServiceAccountToken asks the TokenRequest API for a token of an
// existing ServiceAccount.
func (s *Server) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	req := map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": map[string]any{"expirationSeconds": 3600}}
	code, body, err := s.Do(ctx, http.MethodPost, "/api/v1/namespaces/"+namespace+"/serviceaccounts/"+name+"/token", req)
	if err != nil {
		return "", err
	}
	if code != http.StatusCreated && code != http.StatusOK {
		return "", fmt.Errorf("token for %s/%s: %d %s", namespace, name, code, firstLine(body))
	}
	var tr struct {
		Status struct {
			Token string `json:"token"`
		} `json:"status"`
	}
	if err := json.Unmarshal(body, &tr); err != nil || tr.Status.Token == "" {
		return "", fmt.Errorf("token for %s/%s: unreadable answer %s", namespace, name, firstLine(body))
	}
	return tr.Status.Token, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// writeCredentials generates a CA, a serving certificate for 127.0.0.1
// and localhost, the service account signing key and an admin token.
func writeCredentials(dir string, advertise netip.Addr) (*credentials, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "routed-test-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default.svc"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
	}
	if advertise.IsValid() {
		srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, advertise.AsSlice())
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	c := &credentials{
		caPEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		cert:     filepath.Join(dir, "apiserver.crt"),
		key:      filepath.Join(dir, "apiserver.key"),
		tokens:   filepath.Join(dir, "tokens.csv"),
		saPub:    filepath.Join(dir, "sa.pub"),
		saKey:    filepath.Join(dir, "sa.key"),
		adminTok: base64.RawURLEncoding.EncodeToString(tok),
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	writes := []struct {
		path string
		data []byte
	}{
		{filepath.Join(dir, "ca.crt"), c.caPEM},
		{c.cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})},
		{c.key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER})},
		{c.saKey, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saKeyDER})},
		{c.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
		// token,user,uid,"group1,group2"
		{c.tokens, []byte(c.adminTok + ",routed-test-admin,routed-test-admin,\"system:masters\"\n")},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}
