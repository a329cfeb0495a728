package install_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/routed-net/routed/tests/testbin"
)

// fixture lays out what the init container sees: the image's binaries,
// the host's CNI dirs, etcd secrets and a service account.
type fixture struct {
	src, bin, net, secrets, sa string
	env                        []string
}

// plugins are routed's executables in the image: the socket-only builds
// and the full builds they hand over to.
var plugins = []string{"routed-cni", "routed-ipam", "routed-cni-full", "routed-ipam-full"}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{
		src: filepath.Join(root, "image-bin"), bin: filepath.Join(root, "host/opt/cni/bin"),
		net: filepath.Join(root, "host/etc/cni/net.d"), secrets: filepath.Join(root, "calico-secrets"),
		sa: filepath.Join(root, "sa"),
	}
	for _, d := range []string{f.src, f.secrets, f.sa} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range plugins {
		b, err := os.ReadFile(testbin.Path(t, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(f.src, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"etcd-key": "KEY-MATERIAL", "etcd-cert": "CERT", "etcd-ca": "CA"} {
		if err := os.WriteFile(filepath.Join(f.secrets, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(f.sa, "token"), []byte("sa-token-123\n"), 0o600)
	_ = os.WriteFile(filepath.Join(f.sa, "ca.crt"), []byte("ca-bytes"), 0o600)
	f.env = []string{
		"CNI_SOURCE_DIR=" + f.src, "CNI_BIN_DIR=" + f.bin, "CNI_NET_DIR=" + f.net,
		"CNI_ETCD_SECRETS_DIR=" + f.secrets, "SERVICEACCOUNT_DIR=" + f.sa,
		"ETCD_ENDPOINTS=https://etcd.example:2379", "CNI_MTU=1440",
		"KUBERNETES_NODE_NAME=node-1", "KUBERNETES_SERVICE_HOST=kubernetes.default.svc", "KUBERNETES_SERVICE_PORT=443",
	}
	return f
}

// run executes "routed-cni install" from the image dir as the init
// container does.
func (f *fixture) run(t *testing.T, argv0 string, args []string, extra ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(argv0, args...)
	cmd.Env = append(append([]string{"PATH=/usr/bin:/bin"}, f.env...), extra...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestInstall(t *testing.T) {
	f := newFixture(t)
	out, err := f.run(t, filepath.Join(f.src, "routed-cni"), []string{"install"})
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	for _, name := range plugins {
		st, err := os.Stat(filepath.Join(f.bin, name))
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v", name, err, st)
		}
	}
	// A socket-only plugin never sits in CNI_BIN_DIR without its full build.
	for _, name := range []string{"routed-cni", "routed-ipam"} {
		thin := strings.Index(out, "installed "+filepath.Join(f.bin, name)+"\n")
		full := strings.Index(out, "installed "+filepath.Join(f.bin, name+"-full")+"\n")
		if full < 0 || thin < full {
			t.Errorf("%s installed before %s-full:\n%s", name, name, out)
		}
	}
	conf, err := os.ReadFile(filepath.Join(f.net, "10-routed.conflist"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(conf), "__") {
		t.Errorf("placeholders left:\n%s", conf)
	}
	l, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		t.Fatalf("conflist: %v", err)
	}
	var p map[string]any
	_ = json.Unmarshal(l.Plugins[0].Bytes, &p)
	want := map[string]any{
		"type": "routed-cni", "etcd_endpoints": "https://etcd.example:2379", "mtu": 1440.0, "nodename": "node-1",
		"datastore_type": "etcdv3", "log_level": "info",
		"etcd_key_file":     "/etc/cni/net.d/routed-tls/etcd-key",
		"etcd_cert_file":    "/etc/cni/net.d/routed-tls/etcd-cert",
		"etcd_ca_cert_file": "/etc/cni/net.d/routed-tls/etcd-ca",
	}
	for k, v := range want {
		if p[k] != v {
			t.Errorf("%s = %v, want %v", k, p[k], v)
		}
	}
	if kc := p["kubernetes"].(map[string]any)["kubeconfig"]; kc != "/etc/cni/net.d/routed-kubeconfig" {
		t.Errorf("kubeconfig path %v", kc)
	}
	for _, name := range []string{"routed-tls/etcd-key", "routed-tls/etcd-cert", "routed-tls/etcd-ca"} {
		st, err := os.Stat(filepath.Join(f.net, name))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (%v), want 0600", name, st.Mode().Perm(), err)
		}
	}
	// The kubeconfig is routed's to write, with a TokenRequest token
	// (routed/cnitoken): install writes none, and never one with the
	// mounted service account token.
	if _, err := os.Lstat(filepath.Join(f.net, "routed-kubeconfig")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("install wrote routed-kubeconfig (%v); routed writes it", err)
	}
	if strings.Contains(out, "KEY-MATERIAL") || strings.Contains(out, "sa-token-123") {
		t.Errorf("installer output leaks a secret:\n%s", out)
	}
}

// TestInstallAsArgv0 runs the binary through a link named "install".
func TestInstallAsArgv0(t *testing.T) {
	f := newFixture(t)
	link := filepath.Join(t.TempDir(), "install")
	if err := os.Symlink(filepath.Join(f.src, "routed-cni"), link); err != nil {
		t.Fatal(err)
	}
	if out, err := f.run(t, link, nil); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(f.net, "10-routed.conflist")); err != nil {
		t.Fatal(err)
	}
}

func TestInstallKeepsAndSkips(t *testing.T) {
	f := newFixture(t)
	if err := os.MkdirAll(f.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(f.bin, "routed-ipam")
	_ = os.WriteFile(old, []byte("old"), 0o755)
	out, err := f.run(t, filepath.Join(f.src, "routed-cni"), []string{"install"},
		"UPDATE_CNI_BINARIES=false", "SKIP_CNI_BINARIES=routed-cni", "CNI_CONF_NAME=05-custom.conflist")
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(old); string(b) != "old" {
		t.Error("existing binary replaced although UPDATE_CNI_BINARIES=false")
	}
	if _, err := os.Stat(filepath.Join(f.bin, "routed-cni")); err == nil {
		t.Error("skipped binary installed")
	}
	if _, err := os.Stat(filepath.Join(f.net, "05-custom.conflist")); err != nil {
		t.Error(err)
	}
}

// TestInstallTLSDirIsPrivate: install enforces mode 0700 on an existing
// routed-tls directory and refuses one that is a symlink (the keys were
// copied wherever it pointed).
func TestInstallTLSDirIsPrivate(t *testing.T) {
	f := newFixture(t)
	bin := filepath.Join(f.src, "routed-cni")
	tlsDir := filepath.Join(f.net, "routed-tls")
	if err := os.MkdirAll(tlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tlsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := f.run(t, bin, []string{"install"}); err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	if st, err := os.Stat(tlsDir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("routed-tls mode %v (%v), want 0700", st.Mode().Perm(), err)
	}

	elsewhere := t.TempDir()
	if err := os.RemoveAll(tlsDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, tlsDir); err != nil {
		t.Fatal(err)
	}
	out, err := f.run(t, bin, []string{"install"})
	if err == nil || !strings.Contains(out, "symlink") {
		t.Fatalf("install with routed-tls a symlink: want an error naming the symlink, got %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Fatalf("keys copied through the symlink: %v", ents)
	}
}

func TestInstallErrors(t *testing.T) {
	f := newFixture(t)
	bin := filepath.Join(f.src, "routed-cni")
	t.Run("template not JSON after substitution", func(t *testing.T) {
		out, err := f.run(t, bin, []string{"install"}, "CNI_MTU=auto")
		if err == nil || !strings.Contains(out, "not valid JSON") || !strings.Contains(out, "CNI_MTU") {
			t.Fatalf("got %v:\n%s", err, out)
		}
		if _, err := os.Stat(filepath.Join(f.net, "10-routed.conflist")); err == nil {
			t.Error("invalid configuration was written")
		}
	})
	t.Run("template from file", func(t *testing.T) {
		tpl := filepath.Join(t.TempDir(), "tpl.json")
		_ = os.WriteFile(tpl, []byte(`{"name":"x","cniVersion":"1.1.0","plugins":[{"type":"routed-cni","etcd_endpoints":"__ETCD_ENDPOINTS__"`), 0o644)
		out, err := f.run(t, bin, []string{"install"}, "CNI_NETWORK_CONFIG_FILE="+tpl)
		if err == nil || !strings.Contains(out, "not valid JSON") {
			t.Fatalf("got %v:\n%s", err, out)
		}
	})
	t.Run("unwritable bin dir", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		_ = os.WriteFile(file, nil, 0o644)
		out, err := f.run(t, bin, []string{"install"}, "CNI_BIN_DIR="+filepath.Join(file, "bin"))
		if err == nil || !strings.Contains(out, "CNI_BIN_DIR") {
			t.Fatalf("got %v:\n%s", err, out)
		}
	})
	t.Run("unwritable net dir", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "a-file")
		_ = os.WriteFile(file, nil, 0o644)
		out, err := f.run(t, bin, []string{"install"}, "CNI_NET_DIR="+filepath.Join(file, "net.d"))
		if err == nil || !strings.Contains(out, "CNI_NET_DIR") {
			t.Fatalf("got %v:\n%s", err, out)
		}
	})
	t.Run("installed plugin does not run", func(t *testing.T) {
		src := t.TempDir()
		_ = os.WriteFile(filepath.Join(src, "routed-broken"), []byte("#!/bin/sh\necho nonsense\n"), 0o755)
		out, err := f.run(t, bin, []string{"install"}, "CNI_SOURCE_DIR="+src)
		if err == nil || !strings.Contains(out, "routed-broken") {
			t.Fatalf("got %v:\n%s", err, out)
		}
	})
}
