package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/tests/lab"
)

// etcdFigures are read from etcd's /metrics and /proc.
type etcdFigures struct {
	watchers, slow, dbSize, dbInUse, sent float64
	// fsyncs and fsyncSecs count the WAL's fsyncs and their time.
	fsyncs, fsyncSecs float64
	mem               procMem
	ticks             int64
}

func (b *bigRun) etcdNow(ctx context.Context) (etcdFigures, error) {
	var e etcdFigures
	m, err := scrape(ctx, b.etcd, b.l.Topo.EtcdEndpoint()+"/metrics")
	if err != nil {
		return e, err
	}
	e.watchers, _ = m.Sum("etcd_debugging_mvcc_watcher_total", nil)
	e.slow, _ = m.Sum("etcd_debugging_mvcc_slow_watcher_total", nil)
	e.dbSize, _ = m.Sum("etcd_mvcc_db_total_size_in_bytes", nil)
	e.dbInUse, _ = m.Sum("etcd_mvcc_db_total_size_in_use_in_bytes", nil)
	e.sent, _ = m.Sum("etcd_network_client_grpc_sent_bytes_total", nil)
	for _, h := range m["etcd_disk_wal_fsync_duration_seconds"].GetMetric() {
		e.fsyncs += float64(h.GetHistogram().GetSampleCount())
		e.fsyncSecs += h.GetHistogram().GetSampleSum()
	}
	if e.mem, err = readMem(b.etcdPID); err != nil {
		return e, fmt.Errorf("etcd (pid %d): %w", b.etcdPID, err)
	}
	e.ticks, err = cpuTicks(b.etcdPID)
	return e, err
}

func (b *bigRun) startWatchers(ctx context.Context) error {
	if b.f.watchers == 0 {
		return nil
	}
	t := time.Now()
	w, err := startWatchers(ctx, b.etcd, b.l.Topo.EtcdEndpoint(), b.f.watchers, b.f.watchConns)
	if err != nil {
		return err
	}
	b.watch = w
	e, err := b.etcdNow(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("==> %d whole-prefix watches on %d connections in %s; etcd counts %.0f watchers\n",
		w.created, len(w.conns), time.Since(t).Round(time.Millisecond), e.watchers)
	return nil
}

// startNodes starts the real nodes one after the other against the
// loaded datastore (their pods already there, as after an upgrade) and
// times each to ready, then checks pod traffic between them and keeps
// it going.
func (b *bigRun) startNodes(ctx context.Context) error {
	for _, n := range b.nodes {
		b.logMarks[n.name()] = logSize(b.dir, n.name())
		t := time.Now()
		if err := n.start(b.dir, b.bins.Routed, b.l.Topo.EtcdEndpoint()); err != nil {
			return err
		}
		d, err := n.waitReady(ctx, t, b.f.readyTimeout)
		if err != nil {
			return err
		}
		n.acct.ready = d
		fmt.Printf("==> %s ready %s after its start\n", n.name(), d.Round(time.Millisecond))
	}
	pods := map[string][]lab.Pod{}
	for _, p := range b.l.Pods() {
		pods[p.Node] = append(pods[p.Node], p)
	}
	for i, n := range b.nodes {
		from := pods[n.name()]
		to := pods[b.nodes[(i+1)%len(b.nodes)].name()]
		if len(from) == 0 || len(to) == 0 || from[0].NS == to[len(to)-1].NS {
			continue
		}
		pp := pingPair{from: from[0], to: to[len(to)-1].IP, res: make(chan lab.PingResult, 1)}
		deadline := time.Now().Add(30 * time.Second)
		for {
			got, err := b.l.Ping(ctx, pp.from, pp.to, 1)
			if err == nil && got == 1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s cannot reach %s after 30 s: %v", pp.from.Name, pp.to, err)
			}
			if !sleep(ctx, 500*time.Millisecond) {
				return ctx.Err()
			}
		}
		b.pings = append(b.pings, pp)
	}
	fmt.Printf("==> pod traffic across the real nodes: %d pairs answer\n", len(b.pings))
	return nil
}

// trackedAddrs are the loaded pods labelled for tracking.
func (b *bigRun) trackedAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, ps := range b.pods {
		for _, p := range ps {
			if p.tracked {
				out[p.addr] = true
			}
		}
	}
	return out
}

// startTracking finds, on every real node, the set holding the tracked
// pods: every loaded tracked address must be there (the first
// programming is complete).
func (b *bigRun) startTracking(ctx context.Context) error {
	want := b.trackedAddrs()
	if len(want) == 0 {
		return fmt.Errorf("no simulated pod is tracked: raise -track or -pods")
	}
	var names []string
	for _, n := range b.nodes {
		names = append(names, n.name())
	}
	t, err := newSetTracker(names)
	if err != nil {
		return err
	}
	b.tracker = t
	start := time.Now()
	summary, err := t.findTarget(ctx, want, 2*time.Minute)
	if err != nil {
		return err
	}
	b.out.sets = fmt.Sprintf("every one of the %d loaded tracked pods in each real node's set %s after the last node was ready: %s",
		len(want), time.Since(start).Round(time.Millisecond), summary)
	fmt.Printf("==> %s\n", b.out.sets)
	return nil
}

// measureIdle settles, then reads CPU over the idle window and memory
// at its end.
func (b *bigRun) measureIdle(ctx context.Context) error {
	// 30 s: the last node started has done its start-up's garbage
	// collections (and routed's trim of start-up's pages, where it has it).
	fmt.Printf("==> settling 30s, then measuring idle for %s\n", b.f.idle)
	if !sleep(ctx, 30*time.Second) {
		return ctx.Err()
	}
	t0 := make([]int64, len(b.nodes))
	for i, n := range b.nodes {
		t0[i] = n.ticks()
	}
	e0, err := b.etcdNow(ctx)
	if err != nil {
		return err
	}
	start := time.Now()
	if !sleep(ctx, b.f.idle) {
		return ctx.Err()
	}
	secs := time.Since(start).Seconds()
	for i, n := range b.nodes {
		n.acct.idleCPU = float64(n.ticks()-t0[i]) / 100 / secs
		if n.acct.idle, err = readMem(n.pid()); err != nil {
			return err
		}
		n.acct.peakAnon = n.acct.idle.Anon
		n.acct.peakRSS = max(n.acct.peakRSS, n.acct.idle.HWM)
	}
	if b.gc != nil {
		if err := b.gc.sample(&b.gc.idle); err != nil {
			return err
		}
	}
	e1, err := b.etcdNow(ctx)
	if err != nil {
		return err
	}
	b.out.etcdIdle, b.out.etcdIdleCPU = e1, float64(e1.ticks-e0.ticks)/100/secs
	b.out.etcdPeakAnon = e1.mem.Anon
	return b.writeHeapProfiles(ctx, "idle")
}

// runChurn runs the cluster-wide churn, restarts one real node halfway,
// samples memory, compacts etcd on its period, and waits for the
// tracked pods still on their way.
func (b *bigRun) runChurn(ctx context.Context) error {
	ch := &churn{ds: b.ds, ic: b.ic, sh: b.sh, tracker: b.tracker, inFlight: max(1, b.f.inFlight), rng: rand.New(rand.NewPCG(b.f.seed, 1<<40))}
	for _, ps := range b.pods {
		for _, p := range ps {
			if !p.tracked {
				ch.live = append(ch.live, p)
			}
		}
	}
	for _, r := range b.policies() {
		if r.Meta().Name != trackPolicyName {
			ch.policies = append(ch.policies, r)
		}
	}
	marks := map[string]int64{}
	t0 := make([]int64, len(b.nodes))
	for i, n := range b.nodes {
		marks[n.name()] = logSize(b.dir, n.name())
		t0[i] = n.ticks()
		lists, resyncs, _, err := n.feedCounters(ctx)
		if err != nil {
			return err
		}
		n.acct.churnLists, n.acct.churnResyncs = -lists, -resyncs
	}
	e0, err := b.etcdNow(ctx)
	if err != nil {
		return err
	}
	var m0, by0 int64
	var k0 map[string]kindBytes
	if b.watch != nil {
		m0, by0 = b.watch.counts()
		k0 = b.watch.kindCounts()
	}
	fmt.Printf("==> churn for %s: %.0f pod creations and %.0f deletions a second, a policy edit every %s, a label change every %s\n",
		b.f.churn, b.f.creates, b.f.deletes, b.f.policyEvery, b.f.labelEvery)
	cctx, cancel := context.WithTimeout(ctx, b.f.churn)
	defer cancel()
	pctx, stopPings := context.WithCancel(ctx)
	defer stopPings()
	for _, pp := range b.pings {
		go func() { pp.res <- b.l.PingStream(pctx, pp.from, pp.to, 500*time.Millisecond) }()
	}
	start := time.Now()
	ipam0 := b.ic.Stats()
	self0, _ := cpuTicks(os.Getpid())
	b.out.load0 = loadAvg()
	var wg sync.WaitGroup
	var restartErr, trackErr error
	bg := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	bg(func() { ch.run(cctx, ctx, b.f.creates, b.f.deletes, b.f.policyEvery, b.f.labelEvery) })
	bg(func() { trackErr = b.tracker.run(cctx) })
	bg(func() { b.sampleMemory(cctx) })
	bg(func() { b.compact(cctx) })
	if b.f.restart {
		bg(func() { restartErr = b.restartUnderChurn(cctx, ch) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	self1, _ := cpuTicks(os.Getpid())
	b.out.harnessCPU, b.out.load1 = float64(self1-self0)/100/secs, loadAvg()
	stopPings()
	for _, pp := range b.pings {
		b.out.pings = append(b.out.pings, fmt.Sprintf("%s -> %s: %s", pp.from.Name, pp.to, <-pp.res))
	}
	if restartErr != nil {
		return restartErr
	}
	if trackErr != nil {
		return trackErr
	}
	for i, n := range b.nodes {
		n.acct.churnCPU = float64(n.ticks()-t0[i]) / 100 / secs
		lists, resyncs, missing, err := n.feedCounters(ctx)
		if err != nil {
			return err
		}
		n.acct.churnLists += n.baseLists + lists
		n.acct.churnResyncs += n.baseResyn + resyncs
		n.acct.metricsMissing = missing
		if n.acct.churnFell, err = countInLog(b.dir, n.name(), marks[n.name()], "fell behind"); err != nil {
			return err
		}
	}
	e1, err := b.etcdNow(ctx)
	if err != nil {
		return err
	}
	b.out.etcdChurn, b.out.etcdChurnCPU = e1, float64(e1.ticks-e0.ticks)/100/secs
	b.out.etcdSentPerSec = (e1.sent - e0.sent) / secs
	if n := e1.fsyncs - e0.fsyncs; n > 0 {
		b.out.fsyncs, b.out.fsyncMs = n/secs, 1000*(e1.fsyncSecs-e0.fsyncSecs)/n
	}
	if b.watch != nil {
		m1, by1 := b.watch.counts()
		b.out.watchMsgs, b.out.watchBytes = float64(m1-m0)/secs, float64(by1-by0)/secs
		b.out.watchKinds = kindsSince(b.watch.kindCounts(), k0)
	}
	b.out.churn = ch.summary(secs)
	b.out.createRate, b.out.deleteRate = float64(ch.created.Load())/secs, float64(ch.deleted.Load())/secs
	ipam1 := b.ic.Stats()
	if ops := ch.created.Load() + ch.deleted.Load(); ops > 0 {
		b.out.ipamPerOp = fmt.Sprintf("IPAM client per pod operation: %.2f reads, %.2f transactions, %.3f lost conflicts",
			float64(ipam1.Gets-ipam0.Gets)/float64(ops), float64(ipam1.Txns-ipam0.Txns)/float64(ops), float64(ipam1.Conflicts-ipam0.Conflicts)/float64(ops))
	}
	if err, _ := ch.firstErr.Load().(error); err != nil {
		b.out.churnErr = err.Error()
	}
	// Tracked pods still on their way get a minute.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if err := b.tracker.poll(); err != nil {
			return err
		}
		b.tracker.mu.Lock()
		left := len(b.tracker.pending)
		b.tracker.mu.Unlock()
		if left == 0 || !sleep(ctx, time.Second) {
			break
		}
	}
	b.out.lat = b.tracker.report()
	return nil
}

// sampleMemory keeps every real node's and etcd's peak anonymous memory.
func (b *bigRun) sampleMemory(ctx context.Context) {
	for sleep(ctx, 2*time.Second) {
		for _, n := range b.nodes {
			if !n.running() {
				continue
			}
			if m, err := readMem(n.pid()); err == nil {
				n.acct.peakAnon = max(n.acct.peakAnon, m.Anon)
				n.acct.peakRSS = max(n.acct.peakRSS, m.HWM)
			}
		}
		if m, err := readMem(b.etcdPID); err == nil {
			b.out.etcdPeakAnon = max(b.out.etcdPeakAnon, m.Anon)
		}
		if b.gc != nil {
			_ = b.gc.sample(nil) // finish says so if it exited
		}
	}
}

// compact compacts etcd every period to the revision of the period
// before (kube-apiserver's way with its etcd), so history stays bounded.
// The first period starts with the churn: a run of two periods compacts
// once before its end.
func (b *bigRun) compact(ctx context.Context) {
	if b.f.compactEvery <= 0 {
		return
	}
	var prev int64
	if resp, err := b.ds.Etcd().Get(ctx, "compact-probe", clientv3.WithCountOnly()); err == nil {
		prev = resp.Header.Revision
	}
	for sleep(ctx, b.f.compactEvery) {
		resp, err := b.ds.Etcd().Get(ctx, "compact-probe", clientv3.WithCountOnly())
		if err != nil {
			continue
		}
		if prev > 0 {
			if _, err := b.ds.Etcd().Compact(ctx, prev); err == nil {
				b.out.compactions++
			}
		}
		prev = resp.Header.Revision
	}
}

// finish reads the end state and prints the report.
func (b *bigRun) finish(ctx context.Context) error {
	var err error
	for _, n := range b.nodes {
		if n.acct.after, err = readMem(n.pid()); err != nil {
			return err
		}
		n.acct.peakAnon = max(n.acct.peakAnon, n.acct.after.Anon)
		n.acct.peakRSS = max(n.acct.peakRSS, n.acct.after.HWM)
	}
	if b.gc != nil {
		if err := b.gc.sample(&b.gc.after); err != nil {
			return err
		}
	}
	if err := b.writeHeapProfiles(ctx, "after-churn"); err != nil {
		return err
	}
	for _, n := range b.nodes {
		lists, resyncs, _, err := n.feedCounters(ctx)
		if err != nil {
			return err
		}
		n.acct.lists, n.acct.resyncs = n.baseLists+lists, n.baseResyn+resyncs
		if n.acct.fell, err = countInLog(b.dir, n.name(), b.logMarks[n.name()], "fell behind"); err != nil {
			return err
		}
	}
	if b.out.etcdEnd, err = b.etcdNow(ctx); err != nil {
		return err
	}
	b.out.etcdPeakAnon = max(b.out.etcdPeakAnon, b.out.etcdEnd.mem.Anon)
	keys, err := b.ds.Etcd().Get(ctx, datastore.KeyPrefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	b.out.keysEnd = keys.Count
	b.print()
	return nil
}

// teardown stops everything the run started, by PID, and removes the
// lab's namespaces; safe after any failure.
func (b *bigRun) teardown() {
	if b.tracker != nil {
		b.tracker.stop()
	}
	b.watch.stop()
	for _, n := range b.nodes {
		n.stop()
	}
	b.gc.stop()
	if b.ds != nil {
		b.ds.Close()
	}
	b.l.Down(context.Background())
}

// loadAvg is the machine's 1-minute load average (the machine is shared:
// say how busy it was).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}
