package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// etcdBinary runs `routed etcd`, installed beside routed. Linked into
// routed, etcd's server was 7 of the node binary's 42 MB and, measured
// on an idle node, about 7 MiB of its file-backed memory and 1 MiB of
// its heap (package initialisation), for a command no node runs.
const etcdBinary = "routed-etcd"

// errNoEtcdBinary: routed-etcd is not installed beside routed.
var errNoEtcdBinary = errors.New("routed etcd: " + etcdBinary + " not installed")

func newEtcdCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "etcd [routed-etcd flags]",
		Short: "Run an embedded etcd member (routed-etcd, for one machine, the demo and tests)",
		Long: `Runs routed-etcd, installed beside routed, with the same arguments: an etcd
member, so a lab or a single machine needs no separate etcd. Production
clusters should point ETCD_ENDPOINTS at a real etcd cluster.
` + "`routed etcd --help`" + ` lists its flags.`,
		// The flags are routed-etcd's.
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			path, err := etcdPath()
			if err != nil {
				return err
			}
			// Replaces this process: the caller's pid, signals and
			// output are routed-etcd's.
			err = syscall.Exec(path, append([]string{path}, args...), os.Environ())
			return fmt.Errorf("routed etcd: run %s: %w", path, err)
		},
	}
}

// etcdPath is routed-etcd's path in this executable's directory
// (symlinks resolved), if it is an executable file there.
func etcdPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("%w: %w", errNoEtcdBinary, err)
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	p := filepath.Join(filepath.Dir(self), etcdBinary)
	if st, err := os.Stat(p); err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not beside %s; build it (make build) or run it directly", errNoEtcdBinary, etcdBinary, self)
	}
	return p, nil
}
