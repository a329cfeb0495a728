package lab

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// SnapshotEtcd saves the cluster's backend to path, as `etcdctl snapshot
// save` does (the Maintenance API's snapshot stream, with its hash), and
// returns the revision the cluster was at just before.
func (l *Lab) SnapshotEtcd(ctx context.Context, path string) (int64, error) {
	var rev int64
	err := l.withClusterClient(func(c *clientv3.Client, _ []string) error {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := c.Get(sctx, "routed-lab-snapshot-probe")
		if err != nil {
			return err
		}
		rev = r.Header.Revision
		rc, err := c.Snapshot(sctx)
		if err != nil {
			return err
		}
		defer rc.Close()
		f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, rc); err != nil {
			f.Close()
			return fmt.Errorf("lab: snapshot: %w", err)
		}
		return f.Close()
	})
	return rev, err
}

// RestoreEtcd replaces the cluster with a new one restored from snap, as
// an operator does with `etcdutl snapshot restore` on every member: the
// members are stopped, each gets a fresh data directory restored from
// the snapshot under a new cluster token (a new etcd cluster ID; the
// revision goes back to the snapshot's), and they start on it at the
// same addresses. The old data directories are kept beside, renamed.
func (l *Lab) RestoreEtcd(ctx context.Context, snap, token string) error {
	if !l.Topo.clustered() {
		return fmt.Errorf("lab: RestoreEtcd needs an etcd cluster (Topology.EtcdMembers 3)")
	}
	t := l.Topo
	var initial []string
	for i := 0; i < t.EtcdMembers; i++ {
		initial = append(initial, fmt.Sprintf("%s=https://%s:2380", t.etcdMemberName(i), t.etcdMemberAddr(i).Addr()))
	}
	for i, p := range l.etcdMembers {
		p.stop(syscall.SIGTERM, 5*time.Second)
		dir := filepath.Join(l.Dir, "etcd", t.etcdMemberName(i))
		if err := os.Rename(dir, dir+".before-restore-"+token); err != nil {
			return err
		}
		err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath:        snap,
			Name:                t.etcdMemberName(i),
			OutputDataDir:       dir,
			PeerURLs:            []string{fmt.Sprintf("https://%s:2380", t.etcdMemberAddr(i).Addr())},
			InitialCluster:      strings.Join(initial, ","),
			InitialClusterToken: token,
		})
		if err != nil {
			return fmt.Errorf("lab: restore member %s: %w", t.etcdMemberName(i), err)
		}
	}
	for i := range l.etcdMembers {
		if err := l.startEtcdMember(i); err != nil {
			return err
		}
	}
	_, err := l.EtcdLeader(ctx)
	return err
}
