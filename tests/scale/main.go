// Command scale starts N real routed nodes (each in its own network
// namespace with its own kernel routes), 3 route reflectors and one etcd
// on this machine, creates pods in bursts, and prints what a node costs
// and how fast block routes reach every kernel. `make scale` runs it.
//
// A pod here is what the CNI plugin writes to the datastore: an IPAM
// allocation for the node (the first of a block claims it) and its
// WorkloadEndpoint. No veth is made: the figures are about the datastore
// and the routes, and the harness would otherwise need 100 x 8 netns.
//
// `scale big` (make scale-big, big.go) is the other mode: a datastore the
// size of a big cluster, a handful of real nodes with real pods against
// it, the watch load of every other node, and cluster-wide churn.
// `scale calico-felix` (calicofelix.go) runs Calico's own felix for one
// node of that cluster, in Calico's etcd format, to compare.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
	"github.com/routed-net/routed/pkg/ipam"
	"github.com/routed-net/routed/tests/lab"
)

var pool = netip.MustParsePrefix("10.240.0.0/14")

const podsPerBurst = 8 // per node: one /29 block

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "big" || os.Args[1] == "calico-felix") {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		mode := runBig
		if os.Args[1] == "calico-felix" {
			mode = runCalicoFelix // calicofelix.go
		}
		err := mode(ctx, os.Args[2:])
		stop()
		if err != nil {
			fatal(err)
		}
		return
	}
	nodes := flag.Int("nodes", 100, "routed nodes (felix + speaker)")
	rrs := flag.Int("rrs", 3, "dedicated route reflectors")
	bursts := flag.Int("bursts", 0, "pod bursts (0: enough for 200 block-claim samples, at least 2)")
	idle := flag.Duration("idle", time.Minute, "idle measurement window")
	bin := flag.String("bin", "bin", "directory with routed and routedctl")
	dir := flag.String("dir", "", "work directory (default: a temporary one)")
	edits := flag.Int("policy-edits", 200, "policy edits timed to every node's nftables (0: none)")
	flag.Parse()
	logrus.SetLevel(logrus.WarnLevel) // the IPAM client logs every block claim
	if *bursts == 0 {
		*bursts = max(2, int(math.Ceil(200/float64(*nodes))))
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "routed-scale-")
		if err != nil {
			fatal(err)
		}
		*dir = d
	}
	abs, err := filepath.Abs(*bin)
	if err != nil {
		fatal(err)
	}
	s := lab.NewScale(lab.ScaleConfig{
		Nodes: *nodes, RRs: *rrs, Prefix: "sc", Dir: *dir,
		Bins: lab.Binaries{Routed: filepath.Join(abs, "routed"), Routedctl: filepath.Join(abs, "routedctl")},
		Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) },
	})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = run(ctx, s, *nodes, *bursts, *idle, *edits)
	s.Down(context.Background())
	if err != nil {
		fmt.Printf("logs in %s\n", *dir)
		fatal(err)
	}
	_ = os.RemoveAll(*dir)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "scale: FAIL:", err)
	os.Exit(1)
}

func run(ctx context.Context, s *lab.Scale, n, bursts int, idle time.Duration, edits int) error {
	if err := s.Up(ctx); err != nil {
		return err
	}
	// Idle: settle, then count etcd requests and CPU over the window.
	fmt.Printf("scale: settling 20s, then measuring idle for %s\n", idle)
	if !sleep(ctx, 20*time.Second) {
		return ctx.Err()
	}
	all := append(append([]string(nil), s.RRs...), s.Nodes...)
	e0, err := s.Etcd(ctx)
	if err != nil {
		return err
	}
	cpu0 := map[string]int64{}
	for _, name := range all {
		st, err := s.Stat(name)
		if err != nil {
			return err
		}
		cpu0[name] = st.CPUTicks
	}
	t0 := time.Now()
	if !sleep(ctx, idle) {
		return ctx.Err()
	}
	e1, err := s.Etcd(ctx)
	if err != nil {
		return err
	}
	window := time.Since(t0)
	// Memory as anonymous (heap, stacks, runtime: what a node costs) and
	// file-backed (the executable's page cache, shared by every routed
	// here) apart: one RSS figure mixes the two.
	var anon, file, cpu []float64
	for _, name := range s.Nodes {
		st, err := s.Stat(name)
		if err != nil {
			return err
		}
		anon = append(anon, float64(st.AnonKiB)/1024)
		file = append(file, float64(st.FileKiB)/1024)
		cpu = append(cpu, float64(st.CPUTicks-cpu0[name])/100/window.Minutes())
	}
	var rrAnon, rrFile []float64
	for _, name := range s.RRs {
		st, err := s.Stat(name)
		if err != nil {
			return err
		}
		rrAnon = append(rrAnon, float64(st.AnonKiB)/1024)
		rrFile = append(rrFile, float64(st.FileKiB)/1024)
	}
	procs := float64(len(all))
	idleReq := (e1.Unary - e0.Unary) / window.Seconds() / procs
	// The harness holds one watcher of its own (none yet).
	watchers := e1.Watchers / procs
	fmt.Printf("idle: etcd unary requests %.4f/s per routed (%.0f in %s: %s), watchers per routed %.1f\n",
		idleReq, e1.Unary-e0.Unary, window.Round(time.Second), e1.Delta(e0), watchers)
	fmt.Printf("idle: memory per node: anonymous p50 %.1f MiB max %.1f MiB, file-backed p50 %.1f MiB max %.1f MiB; route reflector: anonymous max %.1f MiB, file-backed max %.1f MiB\n",
		pct(anon, 50), pct(anon, 100), pct(file, 50), pct(file, 100), pct(rrAnon, 100), pct(rrFile, 100))
	fmt.Printf("idle: CPU per node %.2f s/min p50, %.2f s/min max\n", pct(cpu, 50), pct(cpu, 100))

	// Bursts: every node starts podsPerBurst pods; the first claims a
	// block, whose route must reach every node's kernel.
	fib, err := s.WatchFIBs(pool)
	if err != nil {
		return err
	}
	defer fib.Stop()
	claims := &claimLog{at: map[netip.Prefix]time.Time{}, by: map[netip.Prefix]string{}}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	fd := feed.New(s.DS, feed.Options{})
	fd.Subscribe("claims", []api.Kind{feed.KindAffinity}, feed.Dispatch{Affinities: claims})
	go func() { _ = fd.Run(wctx) }()
	ic := ipam.New(s.DS)
	var lat []float64
	var parts latParts
	var missing int
	churnStart, err := s.Etcd(ctx)
	if err != nil {
		return err
	}
	ct0 := time.Now()
	for b := 0; b < bursts; b++ {
		bt := time.Now()
		blocks, err := burst(ctx, s, ic, b)
		if err != nil {
			return err
		}
		// Wait for every block on every node, 60 s at most.
		deadline := time.Now().Add(60 * time.Second)
		pending := blocks
		for len(pending) > 0 && time.Now().Before(deadline) {
			var rest []netip.Prefix
			for _, blk := range pending {
				last, ok := fib.AllSeen(blk, n)
				claimed, cok := claims.get(blk)
				if !ok || !cok {
					rest = append(rest, blk)
					continue
				}
				lat = append(lat, ms(max(0, last.Sub(claimed))))
				parts.add(claims.owner(blk), claimed, fib.Times(blk))
			}
			pending = rest
			if len(pending) > 0 && !sleep(ctx, 50*time.Millisecond) {
				return ctx.Err()
			}
		}
		missing += len(pending)
		fmt.Printf("burst %d: %d pods on %d nodes, %d blocks, all in every kernel after %s (%d missing)\n",
			b+1, n*podsPerBurst, n, len(blocks), time.Since(bt).Round(time.Millisecond), len(pending))
	}
	churnEnd, err := s.Etcd(ctx)
	if err != nil {
		return err
	}
	// What the routed processes asked of etcd: everything but the
	// harness's own IPAM requests and endpoint writes.
	st := ic.Stats()
	harness := float64(st.Gets+st.Txns) + float64(wepWrites.Load())
	churnSecs := time.Since(ct0).Seconds()
	churnReq := (churnEnd.Unary - churnStart.Unary - harness) / churnSecs / procs
	if err := fib.Err(); err != nil {
		return err
	}
	fmt.Printf("claim->all FIBs: %d samples, p50 %.0f ms, p99 %.0f ms, max %.0f ms; %d blocks never reached every kernel\n",
		len(lat), pct(lat, 50), pct(lat, 99), pct(lat, 100), missing)
	parts.print()
	fmt.Printf("churn: etcd unary requests by routed %.4f/s per routed (%.0f by the harness creating %d pods, %.0f in all: %s)\n",
		churnReq, harness, wepWrites.Load(), churnEnd.Unary-churnStart.Unary, churnEnd.Delta(churnStart))

	// A route reflector restarts: time until it has every session and
	// every block again; no node may lose a route meanwhile (GR, and the
	// other reflectors).
	lost0 := fib.Lost()
	rr := s.RRs[0]
	rt := time.Now()
	s.StopNode(rr)
	if err := s.StartNode(rr); err != nil {
		return err
	}
	if err := s.WaitReady(ctx, 5*time.Minute); err != nil {
		return err
	}
	reconverge := time.Since(rt)
	fmt.Printf("route reflector %s restart: all %d sessions back in %s; pool routes lost from node kernels meanwhile: %d\n",
		rr, n, reconverge.Round(time.Millisecond), fib.Lost()-lost0)
	if len(lat) < 200 {
		fmt.Printf("note: %d samples; p99 needs at least 200 (raise -bursts)\n", len(lat))
	}
	if edits > 0 {
		if err := policyEdits(ctx, s, edits); err != nil {
			return err
		}
	}
	fmt.Printf("scale: %d nodes, claim->all FIBs p99 %.0f ms, idle etcd req/s/node %.4f, anonymous p50 %.1f MiB, file-backed p50 %.1f MiB\n",
		n, pct(lat, 99), idleReq, pct(anon, 50), pct(file, 50))
	if missing > 0 {
		return fmt.Errorf("%d blocks never reached every kernel", missing)
	}
	return nil
}

// wepWrites counts the harness's endpoint writes (one request each).
var wepWrites atomic.Int64

// burst starts podsPerBurst pods on every node, 16 nodes at a time, and
// returns the blocks they claimed.
func burst(ctx context.Context, s *lab.Scale, ic *ipam.Client, b int) ([]netip.Prefix, error) {
	var mu sync.Mutex
	var blocks []netip.Prefix
	var firstErr error
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, node := range s.Nodes {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			for i := 0; i < podsPerBurst; i++ {
				pod := fmt.Sprintf("b%d-p%d", b, i)
				handle := "scale." + node + "." + pod
				// As the CNI plugin does, ride out an etcd that did not
				// answer in time (a loaded machine, 100 nodes' watches).
				var ips []netip.Addr
				err := datastore.RetryUnavailable(ctx, func() error {
					var err error
					ips, err = ic.AutoAssign(ctx, ipam.AssignArgs{Node: node, HandleID: handle,
						Attrs: ipam.Attributes{Namespace: "default", Pod: pod}})
					return err
				})
				if err == nil && len(ips) == 1 {
					err = datastore.RetryUnavailable(ctx, func() error {
						wepWrites.Add(1)
						return createWEP(ctx, s, node, pod, handle, i+b*podsPerBurst, ips[0])
					})
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("pod %s on %s: %w", pod, node, err)
				}
				if err == nil && i == 0 {
					blocks = append(blocks, netip.PrefixFrom(ips[0], 29).Masked())
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return blocks, firstErr
}

// createWEP writes the pod's WorkloadEndpoint, as routed-cni does; one
// already there is this harness's own write whose answer was lost.
func createWEP(ctx context.Context, s *lab.Scale, node, pod, handle string, n int, ip netip.Addr) error {
	_, err := s.DS.Create(ctx, &api.WorkloadEndpoint{
		TypeMeta: api.TypeMeta{APIVersion: api.APIVersion, Kind: api.KindWorkloadEndpoint},
		Metadata: api.ObjectMeta{Name: api.WorkloadEndpointName(node, "k8s", "default", pod, "", "eth0")},
		Spec: api.WorkloadEndpointSpec{Node: node, Orchestrator: "k8s", Namespace: "default", Pod: pod,
			ContainerID: handle, Endpoint: "eth0", InterfaceName: "cali" + fmt.Sprintf("%011x", n),
			IPNetworks: []string{netip.PrefixFrom(ip, 32).String()}, Handle: handle},
	})
	if errors.Is(err, datastore.ErrExists) {
		return nil
	}
	return err
}

// claimLog keeps when each block's affinity was first seen confirmed.
type claimLog struct {
	mu sync.Mutex
	at map[netip.Prefix]time.Time
	by map[netip.Prefix]string
}

func (c *claimLog) OnAffinitySnapshot(all []ipam.Affinity) {
	for _, a := range all {
		c.OnAffinityUpdate(a, false)
	}
}

func (c *claimLog) OnAffinityUpdate(a ipam.Affinity, deleted bool) {
	if deleted || a.State != "confirmed" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.at[a.CIDR]; !ok {
		c.at[a.CIDR] = time.Now()
		c.by[a.CIDR] = a.Node
	}
}

func (c *claimLog) get(p netip.Prefix) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[p]
	return t, ok
}

// owner is the node that claimed p.
func (c *claimLog) owner(p netip.Prefix) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[p]
}

// pct is the nearest-rank percentile (100: the maximum).
func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
