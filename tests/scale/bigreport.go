package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// report is what a big run measured, besides each node's nodeAcct.
type report struct {
	load, sets, churn, churnErr string
	pings                       []string
	etcdIdle, etcdChurn         etcdFigures
	etcdEnd                     etcdFigures
	etcdIdleCPU, etcdChurnCPU   float64
	etcdPeakAnon                int64 // bytes
	etcdSentPerSec              float64
	watchMsgs, watchBytes       float64 // per second during the churn
	// watchKinds is what one watch received during the churn, by key kind.
	watchKinds             map[string]kindBytes
	harnessCPU             float64 // share of one core during the churn
	fsyncs, fsyncMs        float64 // WAL fsyncs a second during the churn, mean ms
	ipamPerOp              string
	createRate, deleteRate float64 // achieved, a second
	load0, load1           string  // 1-minute load average at the churn's start and end
	compactions            int
	keysEnd                int64
	lat                    latencyReport
}

// summary is what the churn did, per second of it.
func (c *churn) summary(secs float64) string {
	return fmt.Sprintf("%.1f creations/s, %.1f deletions/s (%d and %d failed; %d hand-offs late), %d policy edits, %d label changes (%d failed); create (assign + endpoint) p50 %.0f ms p99 %.0f ms, delete (endpoint + release) p50 %.0f ms p99 %.0f ms",
		float64(c.created.Load())/secs, float64(c.deleted.Load())/secs, c.createFailed.Load(), c.deleteFailed.Load(), c.late.Load(),
		c.policyEdits.Load(), c.labelEdits.Load(), c.editFailed.Load(),
		c.createLat.pct(50), c.createLat.pct(99), c.deleteLat.pct(50), c.deleteLat.pct(99))
}

func (b *bigRun) print() {
	o := &b.out
	sh := b.sh
	fmt.Printf("\nload: %s\n", o.load)
	fmt.Printf("sets: %s\n", o.sets)
	fmt.Printf("churn: %s\n", o.churn)
	fmt.Printf("machine: 1-minute load average %s at the churn's start, %s at its end; the harness (writes, watches, set reads) used %.0f %% of a core\n",
		o.load0, o.load1, 100*o.harnessCPU)
	fmt.Printf("churn: %s; etcd WAL fsyncs %.0f/s, %.1f ms each on average\n", o.ipamPerOp, o.fsyncs, o.fsyncMs)
	if o.churnErr != "" {
		fmt.Printf("churn: first failure: %s\n", o.churnErr)
	}
	var ready, anonIdle, anonAfter, fileIdle, cpuChurn, restart, uncached []float64
	var lists, resyncs, fell float64
	var peak, peakRSS int64
	for _, n := range b.nodes {
		a := n.acct
		fmt.Printf("node %s: ready %.1f s; idle: anonymous %.1f MiB, file-backed %.1f MiB (private %.1f MiB), CPU %.1f %% of a core\n",
			n.name(), a.ready.Seconds(), mib(a.idle.Anon), mib(a.idle.File), mib(a.idle.Private), 100*a.idleCPU)
		fmt.Printf("node %s: churn: CPU %.1f %% of a core; after: anonymous %.1f MiB, file-backed %.1f MiB; anonymous peak from idle on %.1f MiB; resident peak since its start (VmHWM: anonymous and file-backed, start-up included) %.1f MiB\n",
			n.name(), 100*a.churnCPU, mib(a.after.Anon), mib(a.after.File), mib(a.peakAnon), mib(a.peakRSS))
		fmt.Printf("node %s: feed lists %.0f (during churn %.0f), consumer resyncs %.0f (during churn %.0f), \"fell behind\" logged %d (during churn %d)\n",
			n.name(), a.lists, a.churnLists, a.resyncs, a.churnResyncs, a.fell, a.churnFell)
		if len(a.metricsMissing) > 0 {
			fmt.Printf("node %s: not exported: %s (counted as 0)\n", n.name(), strings.Join(a.metricsMissing, ", "))
		}
		if a.restarted {
			fmt.Printf("node %s: restarted under churn: ready %.1f s after its start, from its feed cache: %v (its CPU above includes every process)\n", n.name(), a.restartReady.Seconds(), a.fromCache)
			restart = append(restart, a.restartReady.Seconds())
			if a.restartedUncached {
				fmt.Printf("node %s: restarted again under churn with --feed-cache none: ready %.1f s after its start\n", n.name(), a.restartUncached.Seconds())
				uncached = append(uncached, a.restartUncached.Seconds())
			}
		} else {
			cpuChurn = append(cpuChurn, a.churnCPU)
		}
		ready = append(ready, a.ready.Seconds())
		anonIdle, anonAfter, fileIdle = append(anonIdle, mib(a.idle.Anon)), append(anonAfter, mib(a.after.Anon)), append(fileIdle, mib(a.idle.File))
		lists, resyncs, fell = lists+a.lists, resyncs+a.resyncs, fell+float64(a.fell)
		peak = max(peak, a.peakAnon)
		peakRSS = max(peakRSS, a.peakRSS)
	}
	if len(cpuChurn) == 0 { // one real node, restarted
		cpuChurn = append(cpuChurn, b.nodes[0].acct.churnCPU)
	}
	l := o.lat
	fmt.Printf("remote pod -> every real node's set: %d pods, p50 %.0f ms, p99 %.0f ms, max %.0f ms; without the %d a restart met: p50 %.0f ms, p99 %.0f ms (%d)\n",
		l.samples, l.p50, l.p99, l.max, l.duringRestart, l.quietP50, l.quiet, l.quietN)
	fmt.Printf("  the same from etcd's answer to the endpoint's write (the write's own time left out), without the pods a restart met: p50 %.0f ms, p99 %.0f ms\n",
		l.ackP50, l.ackQuiet)
	for _, n := range slices.Sorted(maps.Keys(l.perNode)) {
		fmt.Printf("  %s: p50 %.0f ms, p99 %.0f ms\n", n, l.perNode[n][0], l.perNode[n][1])
	}
	fmt.Printf("  %d node samples timed by reading the set (no kernel event seen), %d event batches lost, %d tracked pods never seen on every node\n",
		l.polled, l.lostEventBatches, l.missing)
	if l.samples < 200 {
		fmt.Printf("note: %d tracked pods; p99 needs at least 200 (raise -track or -churn)\n", l.samples)
	}
	for _, p := range o.pings {
		fmt.Printf("traffic: %s\n", p)
	}
	w := b.f.watchers
	fmt.Printf("watch load: %d whole-prefix watches on %d connections; during churn %.0f responses/s, %.1f MiB/s read by the harness; etcd sent %.1f MiB/s to all its clients\n",
		w, b.f.watchConns, o.watchMsgs, o.watchBytes/(1<<20), o.etcdSentPerSec/(1<<20))
	if sim := b.sh.simNodes(); w > 0 && w < sim {
		fmt.Printf("watch load: %d of the %d simulated nodes' watches ran; one each would be about %.0f MiB/s from etcd at this event rate (%.2f MiB/s a watch)\n",
			w, sim, o.watchBytes/float64(w)*float64(sim)/(1<<20), o.watchBytes/float64(w)/(1<<20))
	}
	if line := kindsLine(o.watchKinds); line != "" {
		fmt.Printf("watch load: one watch's events during churn by kind (key and value bytes): %s\n", line)
	}
	if b.watch != nil && b.watch.broken.Load() > 0 {
		fmt.Printf("watch load: %d watches broke (their stream failed, or etcd ended them: a watch behind a compaction is canceled)\n", b.watch.broken.Load())
	}
	e := o.etcdEnd
	fmt.Printf("etcd: CPU idle %.1f %% of a core, churn %.1f %%; anonymous idle %.1f MiB, after churn %.1f MiB, peak %.1f MiB; file-backed %.1f MiB; db %.1f MiB (%.1f MiB in use, %d compactions); %d keys; watchers %.0f (slow %.0f)\n",
		100*o.etcdIdleCPU, 100*o.etcdChurnCPU, mib(o.etcdIdle.mem.Anon), mib(e.mem.Anon), mib(o.etcdPeakAnon), mib(e.mem.File),
		e.dbSize/(1<<20), e.dbInUse/(1<<20), o.compactions, o.keysEnd, e.watchers, e.slow)
	gcS := "on the nodes (elected among them)"
	if b.gc != nil {
		fmt.Println(b.gc.report())
		gcS = fmt.Sprintf("in routed cluster-gc, anonymous after churn %.0f MiB, peak %.0f MiB", mib(b.gc.after.Anon), mib(b.gc.peakAnon))
	}
	restartS := "not done"
	if len(restart) > 0 {
		restartS = fmt.Sprintf("%.1f s", pct(restart, 100))
	}
	if len(uncached) > 0 {
		restartS += fmt.Sprintf(" (with --feed-cache none %.1f s)", pct(uncached, 100))
	}
	fmt.Printf("scale-big: %d pods, %d nodes, %d policies: churn %.0f+%.0f pods/s with %d watches; ready p50 %.1f s max %.1f s, restarted under churn %s; anonymous idle p50 %.0f MiB, after churn p50 %.0f MiB max %.0f MiB, peak from idle on %.0f MiB, resident peak with start-ups %.0f MiB; file-backed p50 %.0f MiB; CPU under churn p50 %.1f %% of a core; feed lists %.0f, consumer resyncs %.0f, fell behind %.0f; remote pod -> every real node's set p50 %.0f ms p99 %.0f ms (%d pods; p99 %.0f ms without those a restart met, %.0f ms from the write's answer); etcd CPU under churn %.0f %%, anonymous %.0f MiB, db %.0f MiB, watchers %.0f; cluster GC %s\n",
		sh.pods, sh.nodes, sh.policies, o.createRate, o.deleteRate, w, pct(ready, 50), pct(ready, 100), restartS, pct(anonIdle, 50), pct(anonAfter, 50), pct(anonAfter, 100), mib(peak), mib(peakRSS), pct(fileIdle, 50),
		100*pct(cpuChurn, 50), lists, resyncs, fell, l.p50, l.p99, l.samples, l.quiet, l.ackQuiet, 100*o.etcdChurnCPU, mib(e.mem.Anon), e.dbSize/(1<<20), e.watchers, gcS)
}
