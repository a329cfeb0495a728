// Package k8s_test validates routed's Kubernetes deployment against a
// real kube-apiserver (built from the Go module proxy, see
// kubeapiserver/): every manifest in deploy/ passes
// `kubectl apply --dry-run=server --validate=strict`, the kustomize base
// renders to the same objects as deploy/routed.yaml, the image's build
// script produces the binaries the manifests run, and routed-cni, set up
// by the installer exactly as the DaemonSet does, reads pods from the
// API server with the manifest's least-privilege account: labels land on
// the WorkloadEndpoint, IPAM annotations are honoured, bad ones fail
// cleanly.
//
// One API server (with its own embedded etcd) serves all tests of the
// process; it is started on first use and stopped in TestMain. Each CNI
// test has its own node netns, routed etcd and namespaces, so test
// binaries can run side by side.
package k8s_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/routed-net/routed/pkg/etcdserver"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"

	"github.com/routed-net/routed/internal/testenv"
)

var shared struct {
	once sync.Once
	srv  *kubeapiserver.Server
	etcd *etcdserver.Server
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
	}
	if shared.etcd != nil {
		shared.etcd.Close()
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// cluster returns the process's API server, building kube-apiserver
// first if the cache has none. A failed build fails the test with the
// build's output; it is never skipped.
func cluster(t testing.TB) *kubeapiserver.Server {
	t.Helper()
	skipShort(t)
	shared.once.Do(func() {
		ctx := context.Background()
		// Leave a minute of the test binary's -timeout for reporting.
		// (A benchmark has no deadline.)
		if dt, isT := t.(interface{ Deadline() (time.Time, bool) }); isT {
			if dl, ok := dt.Deadline(); ok {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, dl.Add(-time.Minute))
				defer cancel()
			}
		}
		start := time.Now()
		bin, err := kubeapiserver.Build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, func(f string, a ...any) {
			fmt.Fprintf(os.Stderr, "tests/k8s: "+f+"\n", a...)
		})
		if err != nil {
			shared.err = err
			return
		}
		built := time.Since(start)
		shared.dir, err = os.MkdirTemp("", "routed-k8s-apiserver-")
		if err != nil {
			shared.err = err
			return
		}
		shared.etcd, err = etcdserver.Start(ctx, etcdserver.Config{
			Dir: filepath.Join(shared.dir, "etcd"), ClientAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:0",
			NoFsync: true, LogLevel: "fatal",
		})
		if err != nil {
			shared.err = fmt.Errorf("etcd for kube-apiserver: %w", err)
			return
		}
		start = time.Now()
		shared.srv, shared.err = kubeapiserver.Start(ctx, kubeapiserver.Config{
			Binary: bin, Dir: filepath.Join(shared.dir, "apiserver"), EtcdServers: shared.etcd.Endpoints,
		})
		if shared.err == nil {
			fmt.Fprintf(os.Stderr, "tests/k8s: kube-apiserver %s at %s (binary ready in %s, serving in %s)\n",
				kubeapiserver.Version, shared.srv.URL, built.Round(time.Second), time.Since(start).Round(100*time.Millisecond))
		}
	})
	if shared.err != nil {
		t.Fatalf("kube-apiserver %s: %v", kubeapiserver.Version, shared.err)
	}
	return shared.srv
}

// kubeBinaries builds (once, into the test cache) kube-apiserver and
// the node's binaries (kubelet, kube-proxy, ...) for a real cluster, and
// returns their paths.
func kubeBinaries(ctx context.Context, t *testing.T) (api, node string) {
	t.Helper()
	api, err := kubeapiserver.Build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	node, err = kubeapiserver.BuildNode(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return api, node
}

func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("SKIPPING in -short mode: the Kubernetes tier builds (once) and runs a real kube-apiserver")
	}
}

// requireRoot fails (in CI) or skips loudly (elsewhere) without root.
func requireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "network namespaces, veths, routes")
}

// repoRoot is the module root, found from this file.
func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(filepath.Dir(file)))
}

func deployPath(name string) string { return filepath.Join(repoRoot(), "deploy", name) }

// kubectl runs kubectl as the admin of srv (nil: no server needed) with
// its own cache directory, and returns stdout and stderr.
func kubectl(t *testing.T, srv *kubeapiserver.Server, args ...string) (string, string, error) {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl not found: run `make deps` (apt-get install kubectl)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "KUBECACHEDIR="+filepath.Join(home, "cache"))
	if srv != nil {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+srv.AdminKubeconfig)
	} else {
		cmd.Env = append(cmd.Env, "KUBECONFIG="+filepath.Join(home, "none"))
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	return stdout.String(), stderr.String(), err
}
