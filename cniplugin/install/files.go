package install

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
)

// ErrUnsafeDir is returned when a directory that will hold keys is a
// symlink or not a directory.
var ErrUnsafeDir = errors.New("install: unsafe directory for secrets")

// privateDir makes dir a real directory of mode 0700 owned by whoever
// runs install: created if missing, its mode enforced if it exists (a
// looser mode left by hand is tightened), and refused if it is a symlink
// (the keys would land wherever it points) or not a directory.
func privateDir(dir string) error {
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	case err != nil:
		return fmt.Errorf("%s: %w", dir, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symlink; remove it and run install again", ErrUnsafeDir, dir)
	case !st.IsDir():
		return fmt.Errorf("%w: %s is not a directory; remove it and run install again", ErrUnsafeDir, dir)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("set mode 0700 on %s: %w", dir, err)
	}
	return nil
}

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
