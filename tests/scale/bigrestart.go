package main

import (
	"context"
	"fmt"
	"time"
)

// restartUnderChurn restarts the last real node under the churn (SIGTERM,
// then start) and times it to ready: halfway through; or, with
// -restart-without-cache, at a third from its feed cache (what routed
// does by default) and at two thirds with --feed-cache none (a full
// list), so the report has both in the same run. Before the first, the
// list probe (biglistprobe.go).
func (b *bigRun) restartUnderChurn(ctx context.Context, ch *churn) error {
	n := b.nodes[len(b.nodes)-1]
	first := b.f.churn / 2
	if b.f.restartWithoutCache {
		first = b.f.churn / 3
	}
	start := time.Now()
	if b.f.listProbe > 0 && sleep(ctx, 15*time.Second) {
		if err := listProbe(ctx, b.ds.Etcd(), b.f.listProbe); err != nil && ctx.Err() == nil {
			return fmt.Errorf("list probe: %w", err)
		}
	}
	if !sleep(ctx, first-time.Since(start)) {
		return nil
	}
	d, err := b.restartOnce(ctx, ch, n, nil)
	if err != nil {
		return err
	}
	n.acct.restartReady, n.acct.restarted = d, true
	m, err := scrape(ctx, n.dial, n.url(9091, "/metrics"))
	if err != nil {
		return err
	}
	restores, _ := m.Sum("routed_feed_cache_restores_total", nil)
	n.acct.fromCache = restores > 0
	fmt.Printf("==> %s restarted under churn: ready %s after its start (from its feed cache: %v)\n", n.name(), d.Round(time.Millisecond), n.acct.fromCache)
	if !b.f.restartWithoutCache {
		sleep(ctx, 5*time.Second)
		return nil
	}
	if !sleep(ctx, 2*b.f.churn/3-time.Since(start)) {
		return nil
	}
	d, err = b.restartOnce(ctx, ch, n, []string{"--feed-cache", "none"})
	if err != nil {
		return err
	}
	n.acct.restartUncached, n.acct.restartedUncached = d, true
	fmt.Printf("==> %s restarted under churn with --feed-cache none: ready %s after its start\n", n.name(), d.Round(time.Millisecond))
	sleep(ctx, 5*time.Second)
	return nil
}

// restartOnce stops n (SIGTERM), starts it with args and times it to
// ready; the counters of the stopped process carry over.
func (b *bigRun) restartOnce(ctx context.Context, ch *churn, n *realNode, args []string) (time.Duration, error) {
	lists, resyncs, _, err := n.feedCounters(ctx)
	if err != nil {
		return 0, err
	}
	n.baseTicks, n.baseLists, n.baseResyn = n.ticks(), n.baseLists+lists, n.baseResyn+resyncs
	ch.restarting.Store(true)
	b.tracker.markRestarting()
	defer ch.restarting.Store(false)
	n.stop()
	n.args = args
	t := time.Now()
	if err := n.start(b.dir, b.bins.Routed, b.l.Topo.EtcdEndpoint()); err != nil {
		return 0, err
	}
	d, err := n.waitReady(ctx, t, b.f.readyTimeout)
	if err != nil && ctx.Err() != nil {
		return 0, fmt.Errorf("%s: not ready again before the churn ended (%s): raise -churn", n.name(), time.Since(t).Round(time.Second))
	}
	return d, err
}
