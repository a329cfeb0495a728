package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/routed-net/routed/cniplugin/fullbin"
	"github.com/routed-net/routed/routed/cnitoken"
)

// startCNIToken runs the CNI token refresher (routed/cnitoken) with
// routed's in-cluster identity until the returned stop is called. stop
// also ends routed's life on the node when its DaemonSet is gone
// (uninstallIfDeleted).
func startCNIToken(ctx context.Context, c CNITokenConfig, stateDirs ...string) (stop func(), err error) {
	tc, err := cnitoken.InCluster(c.Kubeconfig, c.Namespace, c.ServiceAccount)
	if err != nil {
		return nil, err
	}
	tc.Validity, tc.RefreshBefore = c.Validity, c.RefreshBefore
	tc.Log = log.WithField("component", "cnitoken")
	if err := tc.Validate(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 2)
	go func() { errc <- cnitoken.Run(runCtx, tc) }()
	var deleted atomic.Bool
	if c.DaemonSet != "" {
		go func() {
			tc.WatchDaemonSet(runCtx, tc.Namespace, c.DaemonSet, func() { deleted.Store(true) })
			errc <- nil
		}()
	}
	return func() {
		cancel()
		<-errc
		if c.DaemonSet != "" {
			<-errc
			if ctx.Err() != nil {
				uninstallIfDeleted(tc, c, stateDirs, deleted.Load())
			}
		}
	}, nil
}

// uninstallIfDeleted runs as routed stops (SIGTERM). When routed's
// DaemonSet is gone or being deleted, this is `kubectl delete` of
// routed, not a restart (a rolling update or an eviction keeps the
// DaemonSet; routed watches it from its start, as the manifests' Role
// that lets it ask goes with the same kubectl delete): routed removes
// what it and install-cni put on the host,
// so the runtime does not keep using a CNI configuration that points at
// a plugin with nobody behind it, and its WireGuard state in the kernel
// (uninstallKernel), so host traffic does not keep going to devices and
// a table nobody programs. When the API cannot say, nothing is
// removed.
func uninstallIfDeleted(tc cnitoken.Config, c CNITokenConfig, stateDirs []string, seenDeleted bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l := log.WithField("daemonset", tc.Namespace+"/"+c.DaemonSet)
	gone := seenDeleted
	if !gone {
		var err error
		if gone, err = tc.DaemonSetGone(ctx, tc.Namespace, c.DaemonSet); err != nil {
			l.WithError(err).Warn("stopping; cannot tell whether routed is being uninstalled, so its files stay on the host")
			return
		}
	}
	if !gone {
		return
	}
	removed := uninstallFiles(c, stateDirs)
	l.WithField("removed", removed).Info("routed's DaemonSet is deleted: removed routed's files from the host")
	// routed runs in the host's network namespace: "" is the host's.
	kernelRemoved, err := uninstallKernel("")
	if err != nil {
		l.WithError(err).Warn("uninstall: could not remove all of routed's WireGuard state from the kernel")
	}
	l.WithField("removed", kernelRemoved).Info("routed's DaemonSet is deleted: removed routed's WireGuard rules, table and devices")
}

// uninstallFiles removes install-cni's and routed's files and returns
// what it removed. The reference plugins install-cni copies (loopback,
// portmap, bandwidth) go only where the host's copy is the one in
// routed's image: another network plugin may have put its own there.
func uninstallFiles(c CNITokenConfig, stateDirs []string) []string {
	var removed []string
	rm := func(p string) {
		if _, err := os.Lstat(p); err != nil {
			return
		}
		if err := os.RemoveAll(p); err != nil {
			log.WithError(err).WithField("path", p).Warn("uninstall: could not remove")
			return
		}
		removed = append(removed, p)
	}
	netDir := filepath.Dir(c.Kubeconfig)
	rm(filepath.Join(netDir, c.CNIConfName))
	rm(c.Kubeconfig)
	rm(filepath.Join(netDir, "routed-tls"))
	// install-cni installs the thin plugins and, beside them, the full
	// builds they hand everything but ADD and DEL to (cniplugin/fullbin).
	for _, name := range []string{"routed-cni", "routed-ipam"} {
		rm(filepath.Join(c.CNIBinDir, name))
		rm(filepath.Join(c.CNIBinDir, name+fullbin.Suffix))
	}
	for _, name := range []string{"loopback", "portmap", "bandwidth"} {
		host, err1 := os.ReadFile(filepath.Join(c.CNIBinDir, name))
		ours, err2 := os.ReadFile(filepath.Join("/opt/cni/bin", name))
		if errors.Join(err1, err2) == nil && bytes.Equal(host, ours) {
			rm(filepath.Join(c.CNIBinDir, name))
		}
	}
	// The state, socket and log directories are hostPath mounts: their
	// contents go; the mount points themselves cannot.
	for _, dir := range append(stateDirs, c.LogDir) {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			rm(filepath.Join(dir, e.Name()))
		}
	}
	return removed
}
