package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestUninstallFilesRemovesWhatInstallCNIPut: the uninstall removes the
// thin plugins and the full builds install-cni puts beside them, the
// conflist, kubeconfig and TLS copies, and what is in the state and log
// directories; another plugin's binary and conflist stay.
func TestUninstallFilesRemovesWhatInstallCNIPut(t *testing.T) {
	dir := t.TempDir()
	netDir, binDir := filepath.Join(dir, "net.d"), filepath.Join(dir, "bin")
	state, logDir := filepath.Join(dir, "state"), filepath.Join(dir, "log")
	ours := []string{
		filepath.Join(netDir, "10-routed.conflist"), filepath.Join(netDir, "routed-kubeconfig"), filepath.Join(netDir, "routed-tls", "etcd-ca"),
		filepath.Join(binDir, "routed-cni"), filepath.Join(binDir, "routed-ipam"),
		filepath.Join(binDir, "routed-cni-full"), filepath.Join(binDir, "routed-ipam-full"),
		filepath.Join(state, "nodename"), filepath.Join(logDir, "cni.log"),
	}
	others := []string{filepath.Join(netDir, "05-other.conflist"), filepath.Join(binDir, "other-cni"), filepath.Join(binDir, "routed-cni-full.bak")}
	for _, p := range append(slices.Clone(ours), others...) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	c := CNITokenConfig{Kubeconfig: filepath.Join(netDir, "routed-kubeconfig"), CNIConfName: "10-routed.conflist", CNIBinDir: binDir, LogDir: logDir}
	removed := uninstallFiles(c, []string{state})
	for _, p := range ours {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there (%v); removed %v", p, err, removed)
		}
	}
	for _, p := range others {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s, not routed's, went: %v", p, err)
		}
	}
	for _, d := range []string{state, logDir} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the mounted directory %s itself must stay: %v", d, err)
		}
	}
}
