package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/routed/status"
)

// ScaleConfig sizes a scale cluster: Nodes routed nodes (felix and the
// speaker, each in its own network namespace with its own kernel routes)
// and RRs dedicated route reflectors, all on one L2 segment with one
// etcd, node-to-node mesh off.
type ScaleConfig struct {
	Nodes, RRs int
	Prefix     string // names of namespaces and links start with it
	Dir        string
	Bins       Binaries
	Logf       func(format string, args ...any)
}

// Scale is a running scale cluster. The fabric namespace holds the bridge
// and etcd; the harness reaches etcd through a dialer that opens its
// sockets in that namespace.
type Scale struct {
	cfg   ScaleConfig
	Nodes []string // felix nodes
	RRs   []string
	addr  map[string]netip.Prefix
	procs map[string]*proc
	rr    map[string]bool
	etcd  *proc
	DS    *datastore.Client
	// Dial opens TCP connections inside the fabric namespace.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Scale's fabric: one /16, the bridge at .0.1.
var scaleNet = netip.MustParsePrefix("10.250.0.0/16")

// FabricNS is the namespace holding the bridge and etcd.
func FabricNS(prefix string) string { return prefix + "-fab" }

func scaleAddr(k int) netip.Prefix {
	b := scaleNet.Addr().As4()
	b[2], b[3] = byte(1+k/200), byte(10+k%200)
	return netip.PrefixFrom(netip.AddrFrom4(b), scaleNet.Bits())
}

func (s *Scale) fabricAddr() netip.Addr {
	b := scaleNet.Addr().As4()
	b[3] = 1
	return netip.AddrFrom4(b)
}

func (s *Scale) etcdEndpoint() string { return "http://" + s.fabricAddr().String() + ":2379" }

// EtcdMetricsURL is etcd's Prometheus endpoint.
func (s *Scale) EtcdMetricsURL() string { return s.etcdEndpoint() + "/metrics" }

// NewScale prepares a cluster; call Up inside the fabric namespace.
func NewScale(cfg ScaleConfig) *Scale {
	s := &Scale{cfg: cfg, addr: map[string]netip.Prefix{}, procs: map[string]*proc{}, rr: map[string]bool{}}
	k := 0
	for i := 1; i <= cfg.RRs; i++ {
		name := fmt.Sprintf("%s-r%d", cfg.Prefix, i)
		s.RRs = append(s.RRs, name)
		s.rr[name] = true
		s.addr[name] = scaleAddr(k)
		k++
	}
	for i := 1; i <= cfg.Nodes; i++ {
		name := fmt.Sprintf("%s-n%d", cfg.Prefix, i)
		s.Nodes = append(s.Nodes, name)
		s.addr[name] = scaleAddr(k)
		k++
	}
	return s
}

// Up builds the fabric namespace, every node's namespace, etcd and the
// configuration, starts every routed and waits until each has its BGP
// sessions up.
func (s *Scale) Up(ctx context.Context) error {
	if err := os.MkdirAll(s.cfg.Dir, 0o755); err != nil {
		return err
	}
	Cleanup(ctx, s.cfg.Prefix, s.cfg.Dir)
	fab := FabricNS(s.cfg.Prefix)
	if err := ip(ctx, "", "netns", "add", fab); err != nil {
		return err
	}
	h, err := netns.GetFromName(fab)
	if err != nil {
		return err
	}
	s.Dial = DialIn(h)
	fabAddr := netip.PrefixFrom(s.fabricAddr(), scaleNet.Bits()).String()
	for _, c := range [][]string{
		{"link", "add", "br0", "type", "bridge"},
		{"addr", "add", fabAddr, "dev", "br0"},
		{"link", "set", "br0", "up"},
		{"link", "set", "lo", "up"},
	} {
		if err := ip(ctx, fab, c...); err != nil {
			return err
		}
	}
	start := time.Now()
	for k, name := range append(append([]string(nil), s.RRs...), s.Nodes...) {
		veth := fmt.Sprintf("%sv%d", s.cfg.Prefix, k)
		for _, st := range []struct {
			ns   string
			args []string
		}{
			{"", []string{"netns", "add", name}},
			{fab, []string{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name}},
			{fab, []string{"link", "set", veth, "master", "br0", "up"}},
			{name, []string{"addr", "add", s.addr[name].String(), "dev", "eth0"}},
			{name, []string{"link", "set", "eth0", "up"}},
			{name, []string{"link", "set", "lo", "up"}},
		} {
			if err := ip(ctx, st.ns, st.args...); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	s.cfg.Logf("scale: %d namespaces in %s", len(s.addr), time.Since(start).Round(time.Millisecond))
	if err := s.startEtcd(ctx); err != nil {
		return err
	}
	if err := s.applyConfig(ctx); err != nil {
		return err
	}
	start = time.Now()
	for _, name := range append(append([]string(nil), s.RRs...), s.Nodes...) {
		if err := s.StartNode(name); err != nil {
			return err
		}
	}
	if err := s.WaitReady(ctx, 5*time.Minute); err != nil {
		return err
	}
	s.cfg.Logf("scale: %d routed up with every session established in %s", len(s.procs), time.Since(start).Round(time.Millisecond))
	return nil
}

func (s *Scale) startEtcd(ctx context.Context) error {
	ep := s.etcdEndpoint()
	p, err := startProc(FabricNS(s.cfg.Prefix), filepath.Join(s.cfg.Dir, "etcd.log"), nil,
		s.cfg.Bins.Routed, "etcd", "--data-dir", filepath.Join(s.cfg.Dir, "etcd"), "--listen-client", strings.TrimPrefix(ep, "http://"))
	if err != nil {
		return err
	}
	s.etcd = p
	recordPID(s.cfg.Dir, p)
	ds, err := datastore.New(datastore.Config{Endpoints: []string{ep}, Dialer: s.Dial})
	if err != nil {
		return err
	}
	s.DS = ds
	return waitUntil(ctx, 30*time.Second, "etcd", func() error {
		_, _, err := ds.List(ctx, "IPPool")
		return err
	})
}

func (s *Scale) applyConfig(ctx context.Context) error {
	var b strings.Builder
	b.WriteString(`apiVersion: routed.io/v1
kind: IPPool
metadata: {name: scale-pool}
spec: {cidr: 10.240.0.0/14, blockSize: 29, ipipMode: Never, natOutgoing: false}
---
apiVersion: routed.io/v1
kind: BGPConfiguration
metadata: {name: default}
spec: {asNumber: 64512, nodeToNodeMeshEnabled: false}
---
apiVersion: routed.io/v1
kind: BGPPeer
metadata: {name: peer-with-route-reflectors}
spec: {nodeSelector: "!has(route-reflector)", peerSelector: "has(route-reflector)"}
`)
	for _, rr := range s.RRs {
		fmt.Fprintf(&b, "---\napiVersion: routed.io/v1\nkind: Node\nmetadata: {name: %s, labels: {route-reflector: \"true\"}}\nspec: {bgp: {ipv4Address: %s, routeReflectorClusterID: 224.0.0.1}}\n", rr, s.addr[rr])
	}
	path := filepath.Join(s.cfg.Dir, "scale.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	out, err := nsRun(ctx, FabricNS(s.cfg.Prefix), s.cfg.Bins.Routedctl, "--etcd-endpoints", s.etcdEndpoint(), "apply", "-f", path)
	if err != nil {
		return fmt.Errorf("apply: %w: %s", err, out)
	}
	return nil
}

func (s *Scale) socket(name string) string { return filepath.Join(s.cfg.Dir, name, "routed.sock") }

// StartNode starts (or restarts) routed in a namespace.
func (s *Scale) StartNode(name string) error {
	dir := filepath.Join(s.cfg.Dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return err
	}
	role := "node"
	if s.rr[name] {
		role = "route-reflector"
	}
	p, err := startProc(name, filepath.Join(dir, "routed.log"), nil, s.cfg.Bins.Routed,
		"--role", role, "--nodename", name, "--ip", s.addr[name].String(),
		"--etcd-endpoints", s.etcdEndpoint(), "--status-socket", s.socket(name),
		"--health-listen", "127.0.0.1:9099", "--metrics-listen", "127.0.0.1:9091",
		"--state-dir", filepath.Join(dir, "state"), "--no-default-ipv4-pool")
	if err != nil {
		return err
	}
	s.procs[name] = p
	recordPID(s.cfg.Dir, p)
	return nil
}

// StopNode stops a routed gracefully (its peers keep its routes: GR).
func (s *Scale) StopNode(name string) {
	s.procs[name].stop(syscall.SIGTERM, 15*time.Second)
	delete(s.procs, name)
}

// PID is a running routed's process ID (ip netns exec execs it).
func (s *Scale) PID(name string) int { return s.procs[name].cmd.Process.Pid }

// Sessions counts a routed's BGP sessions and the established ones.
func (s *Scale) Sessions(ctx context.Context, name string) (up, all int, err error) {
	peers, err := status.NewClient(s.socket(name)).Peers(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range peers {
		if p.Established() {
			up++
		}
	}
	return up, len(peers), nil
}

// WaitReady waits until every node has a session up with every route
// reflector and every route reflector with every node.
func (s *Scale) WaitReady(ctx context.Context, timeout time.Duration) error {
	return waitUntil(ctx, timeout, "every BGP session", func() error {
		for name := range s.procs {
			want := len(s.RRs)
			if s.rr[name] {
				want = len(s.Nodes)
			}
			up, _, err := s.Sessions(ctx, name)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if up != want {
				return fmt.Errorf("%s: %d of %d sessions up", name, up, want)
			}
		}
		return nil
	})
}

// Down stops every process (by PID) and removes the namespaces.
func (s *Scale) Down(ctx context.Context) {
	for _, p := range s.procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.procs {
		p.stop(syscall.SIGTERM, 10*time.Second)
	}
	s.etcd.stop(syscall.SIGTERM, 5*time.Second)
	if s.DS != nil {
		s.DS.Close()
	}
	Cleanup(ctx, s.cfg.Prefix, s.cfg.Dir)
}

// WaitScale multiplies the budget of every wait the lab makes
// (waitUntil, Check's pings). 1 on the host; a lab inside an emulated VM
// (qemu TCG, tests/vm/labvm) runs several times slower and sets it
// before Up. Set it only before the lab starts.
var WaitScale = 1

// waitUntil polls f every 250 ms until it succeeds or timeout (times
// WaitScale) passes or ctx ends. The error names what and f's last
// error.
func waitUntil(ctx context.Context, timeout time.Duration, what string, f func() error) error {
	timeout *= time.Duration(WaitScale)
	err := testenv.Poll(ctx, timeout, 250*time.Millisecond, func() (bool, string, error) {
		if err := f(); err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// DialIn returns a dialer whose sockets live in namespace h: the socket
// is created on a thread switched into h, and stays there.
func DialIn(h netns.NsHandle) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return nil, err
		}
		defer orig.Close()
		if err := netns.Set(h); err != nil {
			return nil, err
		}
		defer func() {
			if err := netns.Set(orig); err != nil {
				panic("scale: cannot return to the original network namespace: " + err.Error())
			}
		}()
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}
