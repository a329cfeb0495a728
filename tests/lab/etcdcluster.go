package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/routed-net/routed/internal/testpki"
)

// etcdTLS is the client side of the cluster's mTLS: the files routed,
// routed-cni and routedctl are given.
type etcdTLS struct{ CAFile, CertFile, KeyFile string }

// clustered reports whether the lab runs an etcd cluster (mTLS, one
// namespace per member) rather than one plain member in the router.
func (t Topology) clustered() bool { return t.EtcdMembers > 1 }

// EtcdMemberNS is etcd member i's namespace (i from 0).
func (t Topology) EtcdMemberNS(i int) string { return fmt.Sprintf("%s-e%d", t.Prefix, i+1) }

// etcdMemberAddr is member i's address on subnet a (.21, .22, ...).
func (t Topology) etcdMemberAddr(i int) netip.Prefix {
	ip := t.SubnetA.Addr().As4()
	ip[3] = byte(21 + i)
	return netip.PrefixFrom(netip.AddrFrom4(ip), t.SubnetA.Bits())
}

func (t Topology) etcdMemberName(i int) string { return fmt.Sprintf("m%d", i+1) }

// EtcdMemberEndpoint is member i's client URL.
func (t Topology) EtcdMemberEndpoint(i int) string {
	return fmt.Sprintf("https://%s:2379", t.etcdMemberAddr(i).Addr())
}

// validateEtcdMembers rejects a member count etcd cannot run well.
func (t Topology) validateEtcdMembers() error {
	if t.EtcdMembers < 0 || t.EtcdMembers > 7 || (t.EtcdMembers > 1 && t.EtcdMembers%2 == 0) {
		return fmt.Errorf("lab: EtcdMembers %d: want 0 or 1 (one plain etcd in the router) or an odd count from 3 to 7", t.EtcdMembers)
	}
	return nil
}

// startEtcdCluster gives every member a namespace on subnet a, writes a
// CA with server, peer and client certificates, and starts the members
// (`routed etcd`, mTLS on client and peer ports) as one static cluster.
func (l *Lab) startEtcdCluster(ctx context.Context) error {
	t := l.Topo
	var ips []net.IP
	var initial []string
	for i := 0; i < t.EtcdMembers; i++ {
		a := t.etcdMemberAddr(i).Addr()
		ips = append(ips, net.IP(a.AsSlice()))
		initial = append(initial, fmt.Sprintf("%s=https://%s:2380", t.etcdMemberName(i), a))
		if err := l.wireEtcdMember(ctx, i); err != nil {
			return err
		}
	}
	pkiDir := filepath.Join(l.Dir, "etcd", "pki")
	if err := os.MkdirAll(pkiDir, 0o700); err != nil {
		return err
	}
	pki, err := testpki.Write(pkiDir, ips...)
	if err != nil {
		return err
	}
	peerCert, peerKey, err := pki.IssuePeer("peer", ips...)
	if err != nil {
		return err
	}
	l.etcdTLS = &etcdTLS{CAFile: pki.CAFile, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	l.etcdArgs = func(i int) []string {
		a := t.etcdMemberAddr(i).Addr().String()
		return []string{"etcd",
			"--name", t.etcdMemberName(i),
			"--data-dir", filepath.Join(l.Dir, "etcd", t.etcdMemberName(i)),
			"--listen-client", a + ":2379", "--listen-peer", a + ":2380",
			"--initial-cluster", strings.Join(initial, ","),
			"--cert-file", pki.ServerCert, "--key-file", pki.ServerKey, "--trusted-ca-file", pki.CAFile,
			"--peer-cert-file", peerCert, "--peer-key-file", peerKey, "--peer-trusted-ca-file", pki.CAFile,
		}
	}
	l.etcdMembers = make([]*proc, t.EtcdMembers)
	for i := range l.etcdMembers {
		if err := l.startEtcdMember(i); err != nil {
			return err
		}
	}
	return l.waitFor(ctx, 60*time.Second, "the etcd cluster to answer", func() error {
		_, err := l.Ctl(ctx, "get", "ippools")
		return err
	})
}

// wireEtcdMember makes member i's namespace, joined to the router's
// subnet-a bridge by a veth whose router end is <prefix>-ev<i+1>.
func (l *Lab) wireEtcdMember(ctx context.Context, i int) error {
	t := l.Topo
	ns, peer := t.EtcdMemberNS(i), l.etcdMemberVeth(i)
	steps := []struct {
		ns   string
		args []string
	}{
		{"", []string{"netns", "add", ns}},
		{ns, []string{"link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", t.RouterNS()}},
		{ns, []string{"addr", "add", t.etcdMemberAddr(i).String(), "dev", "eth0"}},
		{ns, []string{"link", "set", "eth0", "up"}},
		{ns, []string{"link", "set", "lo", "up"}},
		{ns, []string{"route", "add", "default", "via", t.routerAddr("a").Addr().String()}},
		{t.RouterNS(), []string{"link", "set", peer, "master", "br-a"}},
		{t.RouterNS(), []string{"link", "set", peer, "up"}},
	}
	for _, s := range steps {
		if err := ip(ctx, s.ns, s.args...); err != nil {
			return err
		}
	}
	return nil
}

func (l *Lab) etcdMemberVeth(i int) string { return fmt.Sprintf("%s-ev%d", l.Topo.Prefix, i+1) }

func (l *Lab) startEtcdMember(i int) error {
	name := l.Topo.etcdMemberName(i)
	p, err := startProc(l.Topo.EtcdMemberNS(i), filepath.Join(l.Dir, "etcd-"+name+".log"), nil,
		append([]string{l.Bins.Routed}, l.etcdArgs(i)...)...)
	if err != nil {
		return err
	}
	l.etcdMembers[i] = p
	l.recordPID(p)
	return nil
}

// KillEtcdMember kills member i with SIGKILL (kill -9); its data stays.
func (l *Lab) KillEtcdMember(i int) { l.etcdMembers[i].stop(syscall.SIGKILL, 5*time.Second) }

// RestartEtcdMember starts member i again on its data; it rejoins the
// cluster.
func (l *Lab) RestartEtcdMember(i int) error {
	if l.etcdMembers[i].running() {
		return fmt.Errorf("lab: etcd member %d is still running", i+1)
	}
	return l.startEtcdMember(i)
}

// PartitionEtcdMember drops member i's link (its router-side veth goes
// down: no peer and no client reaches it); HealEtcdMember brings it back.
func (l *Lab) PartitionEtcdMember(ctx context.Context, i int) error {
	return ip(ctx, l.Topo.RouterNS(), "link", "set", l.etcdMemberVeth(i), "down")
}

// HealEtcdMember ends PartitionEtcdMember.
func (l *Lab) HealEtcdMember(ctx context.Context, i int) error {
	return ip(ctx, l.Topo.RouterNS(), "link", "set", l.etcdMemberVeth(i), "up")
}

// EtcdStatus is one member's view from etcd's status API.
type EtcdStatus struct {
	Member   int // index of the member asked
	ID       uint64
	Leader   uint64
	Revision int64
}

// IsLeader reports whether the member asked is the leader.
func (s EtcdStatus) IsLeader() bool { return s.ID == s.Leader && s.ID != 0 }

// EtcdStatuses asks every reachable member for its status (over mTLS,
// from the router namespace); unreachable members are left out.
func (l *Lab) EtcdStatuses(ctx context.Context) ([]EtcdStatus, error) {
	var out []EtcdStatus
	err := l.withClusterClient(func(c *clientv3.Client, eps []string) error {
		for i, ep := range eps {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := c.Status(sctx, ep)
			cancel()
			if err != nil {
				continue
			}
			out = append(out, EtcdStatus{Member: i, ID: st.Header.MemberId, Leader: st.Leader, Revision: st.Header.Revision})
		}
		return nil
	})
	return out, err
}

// CompactEtcd compacts the cluster's history up to its current revision
// (physically, as etcd's auto-compaction does) and returns that revision:
// a watch that was behind it cannot resume.
func (l *Lab) CompactEtcd(ctx context.Context) (int64, error) {
	var rev int64
	err := l.withClusterClient(func(c *clientv3.Client, _ []string) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		r, err := c.Get(cctx, "routed-lab-compact-probe")
		if err != nil {
			return err
		}
		rev = r.Header.Revision
		_, err = c.Compact(cctx, rev, clientv3.WithCompactPhysical())
		return err
	})
	return rev, err
}

// withClusterClient runs f with a client of every member, dialling from
// the router namespace over mTLS.
func (l *Lab) withClusterClient(f func(c *clientv3.Client, endpoints []string) error) error {
	if !l.Topo.clustered() {
		return errors.New("lab: needs an etcd cluster (Topology.EtcdMembers 3)")
	}
	tlsCfg, err := transport.TLSInfo{CertFile: l.etcdTLS.CertFile, KeyFile: l.etcdTLS.KeyFile, TrustedCAFile: l.etcdTLS.CAFile}.ClientConfig()
	if err != nil {
		return err
	}
	h, err := netns.GetFromName(l.Topo.RouterNS())
	if err != nil {
		return err
	}
	defer h.Close()
	var eps []string
	for i := 0; i < l.Topo.EtcdMembers; i++ {
		eps = append(eps, l.Topo.EtcdMemberEndpoint(i))
	}
	// No client log: a dead member's dial errors are what the lab's
	// faults are for, not news.
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, TLS: tlsCfg, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return DialIn(h)(ctx, "tcp", addr)
		})}})
	if err != nil {
		return err
	}
	defer c.Close()
	return f(c, eps)
}

// cutTable is the nftables table CutNodeFromEtcd adds to a node's
// namespace: the lab's own, so routed's tables are not touched.
const cutTable = "routed-lab-etcd-cut"

// CutNodeFromEtcd drops every packet between node and every etcd member,
// both ways, as a network fault that leaves the node's other traffic
// (pods, BGP) alone; RestoreNodeEtcd ends it.
func (l *Lab) CutNodeFromEtcd(ctx context.Context, node string) error {
	if !l.Topo.clustered() {
		return errors.New("lab: CutNodeFromEtcd needs an etcd cluster (Topology.EtcdMembers 3)")
	}
	var addrs []string
	for i := 0; i < l.Topo.EtcdMembers; i++ {
		addrs = append(addrs, l.Topo.etcdMemberAddr(i).Addr().String())
	}
	set := strings.Join(addrs, ", ")
	script := fmt.Sprintf(`table ip %[1]s {
	chain out { type filter hook output priority -50; ip daddr { %[2]s } drop; }
	chain in { type filter hook input priority -50; ip saddr { %[2]s } drop; }
}
`, cutTable, set)
	f := filepath.Join(l.Dir, "etcd-cut-"+node+".nft")
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		return err
	}
	_, err := nsRun(ctx, node, "nft", "-f", f)
	return err
}

// RestoreNodeEtcd ends CutNodeFromEtcd.
func (l *Lab) RestoreNodeEtcd(ctx context.Context, node string) error {
	_, err := nsRun(ctx, node, "nft", "delete", "table", "ip", cutTable)
	return err
}

// EtcdLeader is the index of the member that is leader now.
func (l *Lab) EtcdLeader(ctx context.Context) (int, error) {
	leader := -1
	err := l.waitFor(ctx, 20*time.Second, "an etcd leader", func() error {
		sts, err := l.EtcdStatuses(ctx)
		if err != nil {
			return err
		}
		for _, s := range sts {
			if s.IsLeader() {
				leader = s.Member
				return nil
			}
		}
		return fmt.Errorf("no member says it leads (%d answered)", len(sts))
	})
	return leader, err
}

// etcdClientArgs are routedctl's and routed's flags for the lab's etcd.
func (l *Lab) etcdClientArgs() []string {
	args := []string{"--etcd-endpoints", l.Topo.EtcdEndpoint()}
	if l.etcdTLS != nil {
		args = append(args, "--etcd-ca-cert-file", l.etcdTLS.CAFile,
			"--etcd-cert-file", l.etcdTLS.CertFile, "--etcd-key-file", l.etcdTLS.KeyFile)
	}
	return args
}

// etcdClientEnv is etcdClientArgs as the ETCD_* environment.
func (l *Lab) etcdClientEnv() []string {
	env := []string{"ETCD_ENDPOINTS=" + l.Topo.EtcdEndpoint()}
	if l.etcdTLS != nil {
		env = append(env, "ETCD_CA_CERT_FILE="+l.etcdTLS.CAFile,
			"ETCD_CERT_FILE="+l.etcdTLS.CertFile, "ETCD_KEY_FILE="+l.etcdTLS.KeyFile)
	}
	return env
}

// stopEtcdMembers stops every member (SIGTERM, then kill).
func (l *Lab) stopEtcdMembers() {
	for _, p := range l.etcdMembers {
		p.stop(syscall.SIGTERM, 5*time.Second)
	}
}
