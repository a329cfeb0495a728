package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/testenv"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/etcdserver/etcdtest"
	"github.com/routed-net/routed/routed/bgp/bgptest"
	"github.com/routed-net/routed/routed/status"
)

// cluster is a lab of routed nodes sharing one etcd.
type cluster struct {
	t    *testing.T
	lab  *bgptest.Lab
	ds   *datastore.Client
	etcd string // endpoint as the nodes see it
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	lab := bgptest.NewLab(t, "10.77.0.0/24")
	srv := etcdtest.Start(t)
	ds, err := datastore.New(datastore.Config{Endpoints: srv.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ds.Close() })
	target := strings.TrimPrefix(srv.Endpoints[0], "http://")
	lab.Switch.Proxy(t, lab.Switch.Addr.String()+":2379", target)
	return &cluster{t: t, lab: lab, ds: ds, etcd: "http://" + lab.Switch.Addr.String() + ":2379"}
}

func (c *cluster) apply(r api.Resource) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.ds.Apply(ctx, r); err != nil {
		c.t.Fatalf("apply %s %s: %v", r.GetKind(), r.Meta().Name, err)
	}
}

// meshOff applies the cluster's BGPConfiguration "default" with the
// node-to-node mesh off.
func (c *cluster) meshOff() {
	c.t.Helper()
	off := false
	c.apply(&api.BGPConfiguration{Metadata: api.ObjectMeta{Name: "default"}, Spec: api.BGPConfigurationSpec{NodeToNodeMeshEnabled: &off}})
}

func (c *cluster) delete(k api.Kind, name string) {
	c.t.Helper()
	if err := c.ds.Delete(context.Background(), k, name, ""); err != nil {
		c.t.Fatalf("delete %s %s: %v", k, name, err)
	}
}

// node is one routed node process in its namespace.
type node struct {
	name   string
	host   *bgptest.Host
	c      *cluster
	dir    string
	cfg    childConfig
	cmd    *exec.Cmd
	out    *bgptest.LockedBuffer
	done   chan struct{}
	Status *status.Client
}

// addNode creates the host, its Node resource and starts the node.
func (c *cluster) addNode(name string, index int, labels map[string]string, blocks ...string) *node {
	c.t.Helper()
	return c.addNodeWith(name, index, labels, func(cfg *childConfig) { cfg.Blocks = blocks })
}

// addNodeWith is addNode with a hook to change the node's configuration.
func (c *cluster) addNodeWith(name string, index int, labels map[string]string, f func(*childConfig)) *node {
	c.t.Helper()
	return c.addNodeSpec(name, index, labels, nil, f)
}

// addNodeSpec is addNodeWith with a hook to change the Node resource
// too. On a lab with IPv6 the Node has both addresses.
func (c *cluster) addNodeSpec(name string, index int, labels map[string]string, nf func(*api.Node), f func(*childConfig)) *node {
	c.t.Helper()
	h := c.lab.AddHost(name, index)
	res := &api.Node{Metadata: api.ObjectMeta{Name: name, Labels: labels},
		Spec: api.NodeSpec{BGP: &api.NodeBGPSpec{IPv4Address: h.Addr.String() + "/24"}}}
	if h.Addr6.IsValid() {
		res.Spec.BGP.IPv6Address = netip.PrefixFrom(h.Addr6, c.lab.Subnet6.Bits()).String()
	}
	if nf != nil {
		nf(res)
	}
	c.apply(res)
	dir := c.t.TempDir()
	n := &node{name: name, host: h, c: c, dir: dir, cfg: childConfig{
		Node: name, Etcd: c.etcd, LogLevel: childLogLevel(),
		StatusSocket: filepath.Join(dir, "routed.sock"), ControlSocket: filepath.Join(dir, "control.sock"),
		StateDir: filepath.Join(dir, "state"), SecretsDir: filepath.Join(dir, "secrets"),
	}}
	f(&n.cfg)
	n.Status = status.NewClient(n.cfg.StatusSocket)
	n.start()
	c.t.Cleanup(n.kill)
	return n
}

func (n *node) start() {
	t := n.c.t
	t.Helper()
	_ = os.Remove(n.cfg.ControlSocket)
	raw, _ := json.Marshal(n.cfg)
	n.out = &bgptest.LockedBuffer{}
	n.cmd = exec.Command(os.Args[0], "-test.run=^$")
	n.cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.host.Start(n.cmd); err != nil {
		t.Fatalf("start node %s: %v", n.name, err)
	}
	n.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(n.cmd, n.done)
	// Generous: a -race build of the node on a loaded 2-core machine took
	// longer than 15 s to answer (TestMesh, TestBirdIPv6 at load 60-70).
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() string {
		select {
		case <-n.done:
			t.Fatalf("node %s exited while starting:\n%s", n.name, n.out.String())
		default:
		}
		if _, err := os.Stat(n.cfg.ControlSocket); err != nil {
			return fmt.Sprintf("node %s did not start (%v):\n%s", n.name, err, n.out.String())
		}
		if _, err := n.Status.Process(context.Background()); err != nil {
			return fmt.Sprintf("node %s did not start (status: %v):\n%s", n.name, err, n.out.String())
		}
		return ""
	})
}

// kill stops the node process (only the PID this test started).
func (n *node) kill() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	select {
	case <-n.done:
	default:
		_ = n.cmd.Process.Kill()
		<-n.done
	}
	for _, r := range raceReports(n.out.String()) {
		if racesInOurCode(r) {
			n.c.t.Errorf("node %s: data race in routed code:\n%s", n.name, r)
		} else {
			n.c.t.Logf("node %s: data race inside GoBGP (upstream, not ours) ignored", n.name)
		}
	}
	if n.c.t.Failed() {
		n.c.t.Logf("node %s output:\n%s", n.name, n.out.String())
	}
}

// stop asks the node to shut down gracefully (SIGTERM) and waits.
func (n *node) stop() {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.done:
	case <-time.After(10 * time.Second):
		n.c.t.Fatalf("node %s ignored SIGTERM", n.name)
	}
}

func (n *node) sink() sinkState {
	n.c.t.Helper()
	var st sinkState
	resp, err := unixClient(n.cfg.ControlSocket).Get("http://node/sink")
	if err != nil {
		n.c.t.Fatalf("node %s sink: %v\n%s", n.name, err, n.out.String())
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		n.c.t.Fatal(err)
	}
	return st
}

func (n *node) affinity(cidr, state string, deleted bool) {
	n.c.t.Helper()
	q := url.Values{"cidr": {cidr}, "state": {state}, "deleted": {fmt.Sprint(deleted)}}
	resp, err := unixClient(n.cfg.ControlSocket).Post("http://node/affinity?"+q.Encode(), "", nil)
	if err != nil {
		n.c.t.Fatal(err)
	}
	resp.Body.Close()
}

// waitRoutes polls the node's RouteSink until cond holds.
func (n *node) waitRoutes(what string, timeout time.Duration, cond func(map[string]string) bool) {
	n.c.t.Helper()
	testenv.Eventually(n.c.t, timeout, 100*time.Millisecond, func() string {
		if last := n.sink().Routes; !cond(last) {
			return fmt.Sprintf("node %s: %s: never happened; routes %v", n.name, what, last)
		}
		return ""
	})
}

// waitPeers polls the node's status until cond holds.
func (n *node) waitPeers(what string, timeout time.Duration, cond func([]status.Peer) bool) []status.Peer {
	n.c.t.Helper()
	var last []status.Peer
	var lastErr error
	testenv.Eventually(n.c.t, timeout, 100*time.Millisecond, func() string {
		ps, err := n.Status.Peers(context.Background())
		if err != nil {
			lastErr = err
		} else if last = ps; cond(ps) {
			return ""
		}
		return fmt.Sprintf("node %s: %s: never happened; peers %+v (last status error: %v)", n.name, what, last, lastErr)
	})
	return last
}

// has returns a route condition: every prefix -> next hop pair holds.
func has(pairs ...string) func(map[string]string) bool {
	return func(m map[string]string) bool {
		for i := 0; i < len(pairs); i += 2 {
			if m[pairs[i]] != pairs[i+1] {
				return false
			}
		}
		return true
	}
}

func lacks(prefixes ...string) func(map[string]string) bool {
	return func(m map[string]string) bool {
		for _, p := range prefixes {
			if _, ok := m[p]; ok {
				return false
			}
		}
		return true
	}
}

// allEstablished returns a peers condition: exactly these addresses,
// all Established.
func allEstablished(addrs ...netip.Addr) func([]status.Peer) bool {
	return func(ps []status.Peer) bool {
		if len(ps) != len(addrs) {
			return false
		}
		want := map[string]bool{}
		for _, a := range addrs {
			want[a.String()] = true
		}
		for _, p := range ps {
			if !want[p.Address] || !p.Established() {
				return false
			}
		}
		return true
	}
}

func findPeer(ps []status.Peer, a netip.Addr) (status.Peer, bool) {
	for _, p := range ps {
		if p.Address == a.String() {
			return p, true
		}
	}
	return status.Peer{}, false
}

// raceReports splits the race detector's reports out of a process's
// output.
func raceReports(out string) []string {
	var reports []string
	for _, part := range strings.Split(out, "WARNING: DATA RACE")[1:] {
		if end := strings.Index(part, "=================="); end >= 0 {
			part = part[:end]
		}
		reports = append(reports, part)
	}
	return reports
}

// racesInOurCode reports whether one of the racing accesses runs routed
// code. GoBGP has races of its own (its WatchEvent goroutine
// reads paths its server goroutine marks stale); a stack whose only
// routed frame is the go statement that started GoBGP's Serve is
// GoBGP's alone.
func racesInOurCode(report string) bool {
	for _, section := range strings.Split(report, "\n\n") {
		if strings.Contains(section, "created at:") {
			continue
		}
		for _, line := range strings.Split(section, "\n") {
			if strings.Contains(line, "github.com/routed-net/routed/") && !strings.Contains(line, "bgp.New.gowrap") &&
				!strings.HasPrefix(strings.TrimSpace(line), "/") {
				return true
			}
		}
	}
	return false
}
