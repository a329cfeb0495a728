package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

// `scale calico-felix`: Calico's own felix (v3.31.0, nftables mode, BPF
// off) as the felix of one node of the cluster `scale big` writes, the
// same generator's objects in Calico's etcdv3 format (calicoetcd.go), in
// a fresh etcd (routed's, fsync on, as scale big runs it). It reports
// the time to felix's first programmed dataplane and its memory as
// `scale big` reports routed's (proc.go), idle after that and its peak.
// Felix alone: no BIRD, no confd, no calico-node wrapper.

// cfxNode is the name of felix's node.
const cfxNode = "cfx-node"

// cfxFlags are `scale calico-felix`'s options.
type cfxFlags struct {
	sh           shape
	felix, bin   string
	felixLog     string
	dir          string
	keep         bool
	workers      int
	seed         uint64
	readyTimeout time.Duration
	idle, churn  time.Duration
	churnRate    float64
}

func parseCalicoFelixFlags(args []string) (*cfxFlags, error) {
	f := &cfxFlags{}
	fs := flag.NewFlagSet("scale calico-felix", flag.ContinueOnError)
	fs.StringVar(&f.felix, "felix", filepath.Join(kubeapiserver.CacheDir(), "calico-felix", "v3.31.0", "calico-felix"),
		"Calico's felix v3.31.0 (tests/k8s TestCalicoFelixEnforcesOnKDD builds it there)")
	fs.StringVar(&f.felixLog, "felix-log", "Info", "felix's log level (its FELIX_LOGSEVERITYSCREEN)")
	fs.StringVar(&f.bin, "bin", "bin", "directory with routed (its etcd runs the datastore)")
	fs.StringVar(&f.dir, "dir", "", "work directory (default: a temporary one, removed after a run that passed)")
	fs.BoolVar(&f.keep, "keep", false, "keep the work directory (felix's log, etcd's data)")
	clusterFlags(fs, &f.sh, "felix's node's")
	fs.IntVar(&f.sh.localPolicies, "local-policies", 10, "NetworkPolicies of felix's pods' namespace (default), as scale big's")
	fs.IntVar(&f.sh.netsets, "netsets", 500, "network sets (one in five global)")
	fs.IntVar(&f.sh.realPods, "local-pods", 10, "pods on felix's node (a veth each in its namespace)")
	fs.Float64Var(&f.sh.track, "track", 0.03, "share of the simulated pods labelled as scale big's tracked ones")
	fs.IntVar(&f.sh.blockBits, "block-size", 26, "the pool's block size (prefix length)")
	fs.IntVar(&f.workers, "workers", 32, "parallel writers while loading the datastore")
	fs.DurationVar(&f.readyTimeout, "ready-timeout", 15*time.Minute, "how long felix may take to be in sync and programmed")
	fs.DurationVar(&f.idle, "idle", time.Minute, "idle measurement window after felix is ready")
	fs.DurationVar(&f.churn, "churn", 4*time.Minute, "pod churn after the idle window (0: none)")
	fs.Float64Var(&f.churnRate, "churn-rate", 75, "pod replacements a second during the churn (each a delete and a create)")
	var seed int64
	fs.Int64Var(&seed, "seed", 1, "seed of the generated cluster")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	f.seed = uint64(seed)
	sh := &f.sh
	sh.real = 1
	switch {
	case sh.nodes < 2 || sh.nodes-1 > 32000:
		return nil, fmt.Errorf("-nodes: 2 to 32,001")
	case sh.realPods < 1 || sh.realPods > 60:
		return nil, fmt.Errorf("-local-pods: 1 to 60")
	case sh.pods < sh.realPods+sh.simNodes():
		return nil, fmt.Errorf("-pods: at least -local-pods plus one a simulated node")
	case sh.namespaces < 1:
		return nil, fmt.Errorf("-namespaces: at least 1")
	case sh.policies < sh.localPolicies+1:
		return nil, fmt.Errorf("-policies: at least -local-policies + 1 (the tracking policy)")
	case sh.blockBits < 20 || sh.blockBits > 30 || 1<<(32-sh.blockBits) < sh.realPods:
		return nil, fmt.Errorf("-block-size: 20 to 30, with room for -local-pods")
	case f.workers < 1:
		return nil, fmt.Errorf("-workers: at least 1")
	case f.idle <= 0 || f.readyTimeout <= 0:
		return nil, fmt.Errorf("-idle and -ready-timeout: more than 0")
	case f.churn < 0 || (f.churn > 0 && f.churnRate <= 0):
		return nil, fmt.Errorf("-churn: 0 or more, with a -churn-rate above 0")
	}
	pool, err := sh.pickPool()
	if err != nil {
		return nil, err
	}
	sh.pool = pool
	if f.bin, err = filepath.Abs(f.bin); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(f.bin, "routed")); err != nil {
		return nil, fmt.Errorf("-bin: no routed in %s (make build): %w", f.bin, err)
	}
	if _, err := os.Stat(f.felix); err != nil {
		return nil, fmt.Errorf("-felix: %w (build it: go test -count=1 -run TestCalicoFelixEnforcesOnKDD ./tests/k8s)", err)
	}
	return f, nil
}

// cfxRun is one run's state.
type cfxRun struct {
	f        *cfxFlags
	dir, ns  string
	ds       *datastore.Client
	dial     dialer
	etcd     *exec.Cmd
	felix    *exec.Cmd
	exited   chan struct{} // closed when felix has exited
	felixLog string
	ifaces   []string    // felix's pods' host devices
	pods     [][]*simPod // per simulated node
	mem      memPeak
}

func runCalicoFelix(ctx context.Context, args []string) error {
	f, err := parseCalicoFelixFlags(args)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("scale calico-felix needs root (a network namespace, nftables)")
	}
	for _, tool := range []string{"ip", "nft", "nsenter", "unshare", "ipset", "iptables-nft-restore", "iptables-legacy-save"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found (the harness or Calico's felix runs it)", tool)
		}
	}
	r := &cfxRun{f: f, dir: f.dir, ns: fmt.Sprintf("cfx-%d", os.Getpid())}
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "routed-scale-calico-felix-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return err
	}
	err = r.run(ctx)
	r.teardown()
	if f.keep || (err != nil && !errors.Is(err, context.Canceled)) {
		fmt.Printf("logs in %s\n", r.dir)
		return err
	}
	if rmErr := os.RemoveAll(r.dir); err == nil {
		err = rmErr
	}
	return err
}

func (r *cfxRun) run(ctx context.Context) error {
	sh := &r.f.sh
	gnps, nps := sh.policyMix()
	fmt.Printf("==> Calico's felix (%s) for 1 node of %d; %d pods (%d on felix's node), %d namespaces, %d policies (%d global, %d namespaced, %d of felix's pods' namespace), %d network sets, pool %s, /%d blocks\n",
		r.f.felix, sh.nodes, sh.pods, sh.realPods, sh.namespaces, sh.policies, gnps+1, nps+sh.localPolicies, sh.localPolicies+1, sh.netsets, sh.pool, sh.blockBits)
	if err := r.netns(ctx); err != nil {
		return err
	}
	if err := r.startEtcd(ctx); err != nil {
		return err
	}
	if err := r.load(ctx); err != nil {
		return err
	}
	if err := r.localPods(ctx); err != nil {
		return err
	}
	return r.measure(ctx)
}

// netns makes felix's node: a namespace with loopback, an uplink with
// the node's address and a default route, forwarding on.
func (r *cfxRun) netns(ctx context.Context) error {
	if err := ipCmd(ctx, "", "netns", "add", r.ns); err != nil {
		return err
	}
	for _, c := range [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer"},
		{"link", "set", "eth0-peer", "up"},
		{"addr", "add", "10.99.0.2/24", "dev", "eth0"},
		{"link", "set", "eth0", "up"},
		{"route", "add", "default", "via", "10.99.0.1"},
	} {
		if err := ipCmd(ctx, r.ns, c...); err != nil {
			return err
		}
	}
	if out, err := exec.CommandContext(ctx, "ip", "netns", "exec", r.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput(); err != nil {
		return fmt.Errorf("%s: sysctl ip_forward: %v %s", r.ns, err, out)
	}
	d, err := dialerIn(r.ns)
	r.dial = d
	return err
}

// ipCmd runs ip args, in netns ns unless "".
func ipCmd(ctx context.Context, ns string, args ...string) error {
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	if out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startEtcd runs routed's etcd (fsync on) on the node namespace's
// loopback, where felix reaches it.
func (r *cfxRun) startEtcd(ctx context.Context) error {
	logf, err := os.Create(filepath.Join(r.dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	r.etcd = exec.Command("ip", "netns", "exec", r.ns, filepath.Join(r.f.bin, "routed"), "etcd",
		"--data-dir", filepath.Join(r.dir, "etcd"), "--listen-client", "127.0.0.1:2379")
	r.etcd.Stdout, r.etcd.Stderr = logf, logf
	if err := r.etcd.Start(); err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	if r.ds, err = datastore.New(datastore.Config{Endpoints: []string{"http://127.0.0.1:2379"}, Dialer: r.dial}); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.ds.Etcd().Get(c, "/calico")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd did not answer in 30 s (log %s): %w", filepath.Join(r.dir, "etcd.log"), err)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// memPeak samples a process's memory until stopped.
type memPeak struct {
	mu        sync.Mutex
	anon, rss int64
	samples   int
	err       error
}

func (m *memPeak) sample(pid int) {
	pm, err := readMem(pid)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.err = err
		return
	}
	m.samples++
	m.anon = max(m.anon, pm.Anon)
	m.rss = max(m.rss, pm.Anon+pm.File)
}

func (m *memPeak) get() (anon, rss int64, samples int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.anon, m.rss, m.samples
}

func (r *cfxRun) teardown() {
	if r.felix != nil && r.felix.Process != nil {
		_ = r.felix.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(10 * time.Second):
			fmt.Printf("felix (pid %d) still running 10 s after SIGTERM: killing it\n", r.felix.Process.Pid)
			_ = r.felix.Process.Kill()
			<-r.exited
		}
	}
	if r.ds != nil {
		r.ds.Close()
	}
	if r.etcd != nil && r.etcd.Process != nil {
		_ = r.etcd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = r.etcd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = r.etcd.Process.Kill()
			<-done
		}
	}
	if out, err := exec.Command("ip", "netns", "del", r.ns).CombinedOutput(); err != nil {
		fmt.Printf("ip netns del %s: %v %s\n", r.ns, err, out)
	}
}
