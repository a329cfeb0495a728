package install

import (
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
)

// writeAtomic writes data to a temporary file beside path and renames it
// into place, so readers (the runtime, a running plugin) never see a
// partial file.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return replace(path, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// copyAtomic copies src to dst the same way.
func copyAtomic(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return replace(dst, mode, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}

func replace(path string, mode os.FileMode, fill func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if err := tmp.Chmod(mode); err != nil {
		return err
	}
	if err := fill(tmp); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return nil
}

// kubeconfig builds a kubeconfig for the plugin from the service account
// token and CA.
func (c *Config) kubeconfig(token string) ([]byte, error) {
	ca, err := os.ReadFile(filepath.Join(c.ServiceAccountDir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("read service account CA: %w", err)
	}
	server := "https://" + net.JoinHostPort(c.KubeHost, c.KubePort)
	return []byte(fmt.Sprintf(`# Written by routed install; kubelet's CNI plugin uses it.
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: routed
  user:
    token: %q
contexts:
- name: routed-context
  context:
    cluster: local
    user: routed
current-context: routed-context
`, server, base64.StdEncoding.EncodeToString(ca), token)), nil
}
