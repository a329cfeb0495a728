package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"strconv"
	"time"

	"github.com/routed-net/routed/internal/testenv"
)

// measure takes one column's sample: with flows on (files set) one
// connection first, until both nodes' files record it (the mark rules,
// the collector and the file are live), then iperf3, then the
// connection rate with the nodes' routed CPU over the window and its
// tail, and with flows on the records of the window's connections.
func (fb *flowsBench) measure(ctx context.Context, files map[string]string, secs int) flowsColumn {
	b, l := fb.b, fb.l
	b.Helper()
	var c flowsColumn
	_, p, err := net.SplitHostPort(fb.srv)
	if err != nil {
		b.Fatal(err)
	}
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		b.Fatalf("connection server port %q: %v", p, err)
	}
	if len(files) > 0 {
		testenv.Eventually(b, 30*time.Second, 500*time.Millisecond, func() string {
			if err := dialOnce(fb.src, fb.srv); err != nil {
				return fmt.Sprintf("warm-up connection %s -> %s: %v", fb.src.Name, fb.srv, err)
			}
			c.warm++
			for n, f := range files {
				t, err := tallyFlowsFile(f, fb.src.IP, fb.dst.IP, uint16(port))
				if err != nil {
					return err.Error()
				}
				if t.Started == 0 {
					return fmt.Sprintf("%s: no flow %s -> %s yet in %s", n, fb.src.IP, fb.srv, f)
				}
			}
			return ""
		})
	}
	if c.bps, err = l.Throughput(ctx, fb.src, fb.dst, secs); err != nil {
		b.Fatal(err)
	}
	pids := map[string]int{}
	for _, n := range fb.nodes {
		pids[n] = l.NodePID(n)
	}
	fb.waitIdle(pids)
	hits := fb.counters(ctx)
	before := fb.cpu(pids)
	t0 := time.Now()
	c.connRate = connRate(b, fb.src, fb.srv, secs)
	c.conns = int(math.Round(c.connRate * time.Since(t0).Seconds()))
	// Not a wait for an event: the tail is part of the CPU window.
	time.Sleep(flowsBenchTail)
	c.cpu = fb.cpu(pids) - before
	c.kernel = fb.counters(ctx)
	for n, v := range hits {
		c.kernel[n] -= v
	}
	if len(files) > 0 {
		c.tally = fb.recorded(files, c, uint16(port))
	}
	return c
}

// counters reads the deciding rules' packet counters by node.
func (fb *flowsBench) counters(ctx context.Context) map[string]uint64 {
	out := map[string]uint64{}
	for n, r := range fb.rules {
		v, err := ruleCounter(ctx, fb.l, n, r)
		if err != nil {
			fb.b.Fatal(err)
		}
		out[n] = v
	}
	return out
}

// waitIdle waits (up to 3 minutes) until the nodes' routed have
// settled: under 5 % of a core each (the flow records' poll source
// alone costs an idle routed about 2 %: BenchmarkPollIdle) over each
// of two seconds in a row, so
// that a restarted routed's first programming (the 200 policies' sets
// read back and written) is not counted in the window. The policy
// checks before it cannot tell: the tables stay in the kernel across
// restarts.
func (fb *flowsBench) waitIdle(pids map[string]int) {
	fb.b.Helper()
	const step, settled = time.Second, 2
	deadline := time.Now().Add(3 * time.Minute)
	last, quiet := fb.cpu(pids), 0
	for quiet < settled {
		if time.Now().After(deadline) {
			fb.b.Fatalf("routed on %v still busy 3 minutes after its restart (last second: %v of CPU)", fb.nodes, fb.cpu(pids)-last)
		}
		time.Sleep(step)
		now := fb.cpu(pids)
		if now-last < step/20*time.Duration(len(pids)) {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
}

// cpu is the routed processes' CPU time so far; a node whose routed is
// not the one the column started fails the benchmark.
func (fb *flowsBench) cpu(pids map[string]int) time.Duration {
	var sum time.Duration
	for n, pid := range pids {
		if now := fb.l.NodePID(n); now != pid {
			fb.b.Fatalf("%s: routed changed (pid %d, now %d) during the column", n, pid, now)
		}
		d, err := procCPU(pid)
		if err != nil {
			fb.b.Fatalf("%s: %v", n, err)
		}
		sum += d
	}
	return sum
}

// recorded waits (up to 20 s: batches go out every 3 s) until each
// node's file records at least as many connections as the node's
// deciding rule counted in the window, or counts what it dropped. It
// fails the benchmark at once when the column measured (almost)
// nothing: no record of the window and no drop reported, fewer than
// half of the kernel's new connections recorded and no drop reported,
// the deciding rule's counter not counting the connections made (the
// benchmark's rule names are stale), a denied connection, or more
// connections recorded than there were. Other losses are judged in
// report, after the figures.
func (fb *flowsBench) recorded(files map[string]string, c flowsColumn, port uint16) map[string]flowsTally {
	b := fb.b
	b.Helper()
	out := map[string]flowsTally{}
	read := func() bool {
		all := true
		for n, f := range files {
			t, err := tallyFlowsFile(f, fb.src.IP, fb.dst.IP, port)
			if err != nil {
				b.Fatal(err)
			}
			out[n] = t
			all = all && t.Started+t.Dropped >= c.kernel[n]
		}
		return all
	}
	for deadline := time.Now().Add(20 * time.Second); !read() && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
	}
	for n, t := range out {
		kernel, window := float64(c.kernel[n]), float64(windowRecords(t, c.warm))
		switch {
		case t.Denied > 0:
			b.Fatalf("%s: %d connections %s -> %s recorded as denied; the policies allow them (%s)", n, t.Denied, fb.src.IP, fb.srv, files[n])
		case kernel < 0.9*float64(c.conns):
			b.Fatalf("%s: rule %s counted %.0f first packets for %d connections made: it is not the rule that decides them", n, fb.rules[n], kernel, c.conns)
		case window == 0 && t.Dropped == 0:
			b.Fatalf("%s: none of the window's %d connections %s -> %s in %s: the on column measured no flow records", n, c.conns, fb.src.IP, fb.srv, files[n])
		case window < 0.5*kernel && t.Dropped == 0:
			b.Fatalf("%s: the kernel's policy saw %.0f new connections, %.0f recorded, none reported dropped in %s: the on column measured hardly any flow records",
				n, kernel, window, files[n])
		case float64(t.Started) > 1.01*kernel+float64(c.warm):
			b.Fatalf("%s: %d connections recorded (%d warm-up before the window), the kernel's policy saw %.0f: counted twice? (%s)", n, t.Started, c.warm, kernel, files[n])
		}
	}
	return out
}

// windowRecords is how many of a tally's connections were the
// window's, at least: all but the warm-up connections made before it.
func windowRecords(t flowsTally, warm int) uint64 {
	return t.Started - min(t.Started, uint64(warm))
}

// unaccounted is, of the on columns, the new connections the kernel's
// policy saw that are neither recorded nor counted as dropped (lost),
// those of them on a node whose file reported no drop in the column
// at all (silent: no reason given), and the new connections the
// kernel saw, summed over columns and nodes. A node that reported an
// overrun gave the reason but not the number: the kernel does not say
// how many events an overrun cost.
func unaccounted(cols []flowsColumn) (lost, silent, kernel uint64) {
	for _, c := range cols {
		for n, t := range c.tally {
			kernel += c.kernel[n]
			if got := windowRecords(t, c.warm) + t.Dropped; got < c.kernel[n] {
				lost += c.kernel[n] - got
				if t.Dropped == 0 {
					silent += c.kernel[n] - got
				}
			}
		}
	}
	return lost, silent, kernel
}

// report turns the columns' samples into metrics (means over the
// samples; CPU per 1,000 new flows a second over all of a column's
// connections; records against the new connections the kernel's
// policy saw), logs them (a failed benchmark prints no metrics), and
// fails the benchmark when records were lost where no drop was
// reported.
// flows-traced/recorded counts the warm-up connections' traces too.
func (fb *flowsBench) report(cols [2][]flowsColumn) {
	b := fb.b
	mean := func(k int, f func(flowsColumn) float64) float64 {
		s := 0.0
		for _, c := range cols[k] {
			s += f(c)
		}
		return s / float64(len(cols[k]))
	}
	// Cores per 1,000 flows a second is CPU seconds per 1,000
	// connections; in millicores.
	mcore := func(k int) float64 {
		var cpu time.Duration
		var n int
		for _, c := range cols[k] {
			cpu += c.cpu
			n += c.conns
		}
		return cpu.Seconds() * 1e6 / float64(n)
	}
	var rec, traced, dropped uint64
	reasons := map[string]uint64{}
	for _, c := range cols[1] {
		for _, t := range c.tally {
			rec += windowRecords(t, c.warm)
			traced += t.Traced
			dropped += t.Dropped
			for r, v := range t.Reasons {
				reasons[r] += v
			}
		}
	}
	lost, silent, kernel := unaccounted(cols[1])
	bps := func(c flowsColumn) float64 { return c.bps }
	cps := func(c flowsColumn) float64 { return c.connRate }
	b.ReportMetric(mean(0, cps), "conn/s-off")
	b.ReportMetric(mean(1, cps), "conn/s-on")
	b.ReportMetric(mean(1, cps)/mean(0, cps), "conn/s-on/off")
	b.ReportMetric(mean(0, bps)/1e6, "iperf-off-Mbit/s")
	b.ReportMetric(mean(1, bps)/1e6, "iperf-on-Mbit/s")
	b.ReportMetric(mean(1, bps)/mean(0, bps), "iperf-on/off")
	b.ReportMetric(mcore(0), "routed-mcore-per-kflow/s-off")
	b.ReportMetric(mcore(1), "routed-mcore-per-kflow/s-on")
	b.ReportMetric(mcore(1)-mcore(0), "routed-mcore-per-kflow/s-added")
	b.ReportMetric(float64(rec)/float64(kernel), "flows-recorded/conn")
	b.ReportMetric(float64(lost)/float64(kernel), "flows-unaccounted/conn")
	b.ReportMetric(float64(traced)/float64(max(rec, 1)), "flows-traced/recorded")
	b.ReportMetric(float64(dropped), "flows-dropped")
	for k, name := range []string{"off", "on"} {
		for i, c := range cols[k] {
			b.Logf("%s #%d: iperf3 %.0f Mbit/s; %.0f conn/s (%d connections), routed CPU %v (window and %v); new connections the deciding rules counted %v; records %+v (warm-up %d)",
				name, i+1, c.bps/1e6, c.connRate, c.conns, c.cpu, flowsBenchTail, c.kernel, c.tally, c.warm)
		}
	}
	b.Logf("%d policies x %d-address sets, flows on %s and %s: conn/s on/off %.3f (goal >= 0.95), iperf3 on/off %.3f (goal >= 0.98), routed %.1f millicores per 1,000 new flows/s off, %.1f on, %.1f added",
		benchPolicies, benchSetMembers, fb.nodes[0], fb.nodes[1], mean(1, cps)/mean(0, cps), mean(1, bps)/mean(0, bps), mcore(0), mcore(1), mcore(1)-mcore(0))
	// A record lost must at least be reported with its reason; 1 %
	// covers the warm-up connections' uncertainty many times over.
	if lost*100 > kernel {
		b.Logf("flow records missing: %d of the %d new connections the kernel's policy saw in the on columns (%.1f %%), %d of them with no drop reported; dropped %v (an overrun counts once however many events the kernel dropped)",
			lost, kernel, 100*float64(lost)/float64(kernel), silent, reasons)
	}
	if silent*100 > kernel {
		b.Errorf("flow records lost without a dropped count: %d of the %d new connections the kernel's policy saw in the on columns (%.1f %%) on nodes that reported no drop; see the columns above",
			silent, kernel, 100*float64(silent)/float64(kernel))
	}
}
