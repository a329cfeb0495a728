package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/routed-net/routed/tests/lab"
)

// realNode is one real routed of the big run: started by the harness
// (after the lab's own start, which set up its pods) with routed's
// production defaults, so that what it costs is what a node costs.
type realNode struct {
	spec lab.NodeSpec
	dial dialer
	// args are more routed flags for the next start.
	args []string
	// clusterGC: the node runs for the cluster GC election (-cluster-gc
	// nodes); else it runs with --cluster-gc=false.
	clusterGC bool
	cmd       *exec.Cmd
	done      chan struct{}
	// base carries the counters of its earlier processes (a restart
	// starts them at zero again).
	baseTicks            int64
	baseLists, baseResyn float64
	acct                 nodeAcct
}

// nodeAcct is what the report says about one real node.
type nodeAcct struct {
	ready, restartReady time.Duration
	restarted           bool
	// restartUncached: ready after the second restart, with
	// --feed-cache none (-restart-without-cache); fromCache: the first
	// restart started from the feed cache (its metric says so).
	restartUncached              time.Duration
	restartedUncached, fromCache bool
	idle, after                  procMem
	peakAnon                     int64
	// peakRSS: the largest VmHWM of the node's processes (a restart
	// starts another), their start-ups included, which peakAnon,
	// sampled from the idle window on, misses.
	peakRSS           int64
	idleCPU, churnCPU float64 // share of one core
	// lists: full lists of the datastore by the feed since the big
	// start (the first is the start's); resyncs: consumers given a
	// snapshot for a backlog. fell: "fell behind" lines in its log.
	lists, resyncs, churnLists, churnResyncs float64
	fell, churnFell                          int
	metricsMissing                           []string
}

func (n *realNode) name() string { return n.spec.Name }

func (n *realNode) url(port int, path string) string {
	return fmt.Sprintf("http://%s:%d%s", n.spec.Addr.Addr(), port, path)
}

// start runs routed in the node's namespace with the lab's addresses and
// sockets but production's GC periods; its output goes to the lab's log
// of the node, its PID to the lab's pid file (a later run's clean-up
// kills it).
func (n *realNode) start(dir, routed, etcd string) error {
	ndir := filepath.Join(dir, n.name())
	addr := n.spec.Addr.Addr().String()
	args := []string{"netns", "exec", n.name(), routed,
		"--role", "node", "--ip6", "none", "--nodename", n.name(), "--ip", n.spec.Addr.String(),
		"--status-socket", filepath.Join(ndir, "routed.sock"),
		"--health-listen", addr + ":9099", "--metrics-listen", addr + ":9091",
		"--state-dir", filepath.Join(ndir, "state"), "--no-default-ipv4-pool", "--etcd-endpoints", etcd}
	if !n.clusterGC {
		args = append(args, "--cluster-gc=false")
	}
	cmd, done, err := startProc(dir, filepath.Join(ndir, "routed.log"), append(args, n.args...))
	if err != nil {
		return err
	}
	n.cmd, n.done = cmd, done
	return nil
}

// startProc runs ip args with its output appended to logFile, in its
// own process group (the harness's Ctrl-C must not reach it before the
// harness stops it), its PID in the lab's pid file (a later run's
// clean-up kills it); done closes when it has exited.
func startProc(dir, logFile string, args []string) (*exec.Cmd, chan struct{}, error) {
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	if pf, err := os.OpenFile(filepath.Join(dir, "pids"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err == nil {
		fmt.Fprintln(pf, cmd.Process.Pid)
		pf.Close()
	}
	return cmd, done, nil
}

func (n *realNode) running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

func (n *realNode) pid() int { return n.cmd.Process.Pid }

// stop sends SIGTERM and waits (SIGKILL after 20 s).
func (n *realNode) stop() {
	if n.running() {
		stopProc(n.cmd, n.done)
	}
}

// stopProc sends cmd SIGTERM and waits for done (SIGKILL after 20 s).
func stopProc(cmd *exec.Cmd, done chan struct{}) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitReady polls /readiness every 100 ms until it answers 200 and
// returns the time since since.
func (n *realNode) waitReady(ctx context.Context, since time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := since.Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if !n.running() {
			return 0, fmt.Errorf("%s: routed exited; see its routed.log", n.name())
		}
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		code, body, err := httpGet(rctx, n.dial, n.url(9099, "/readiness"))
		cancel()
		if err == nil && code == http.StatusOK {
			return time.Since(since), nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = strings.TrimSpace(body)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
	return 0, fmt.Errorf("%s: not ready after %s: %s", n.name(), timeout, last)
}

// feedCounters reads the feed's lists and consumer resyncs from the
// node's metrics (cumulative since its process started); missing names
// the metrics it does not export.
func (n *realNode) feedCounters(ctx context.Context) (lists, resyncs float64, missing []string, err error) {
	m, err := scrape(ctx, n.dial, n.url(9091, "/metrics"))
	if err != nil {
		return 0, 0, nil, err
	}
	var ok bool
	if lists, ok = m.Sum("routed_feed_lists_total", nil); !ok {
		missing = append(missing, "routed_feed_lists_total")
	}
	// A counter vector shows on the page only once one of its series
	// exists: no consumer resynced yet is no family at all. Its absence
	// is a zero only beside the feed's other counters.
	resyncs, _ = m.Sum("routed_feed_consumer_resyncs_total", nil)
	return lists, resyncs, missing, nil
}

// ticks is the node's CPU time so far, its earlier processes' included.
func (n *realNode) ticks() int64 {
	if !n.running() {
		return n.baseTicks
	}
	t, _ := cpuTicks(n.pid())
	return n.baseTicks + t
}

// logSize is the length of the node's log now (a mark to count from).
func logSize(dir, node string) int64 {
	st, err := os.Stat(filepath.Join(dir, node, "routed.log"))
	if err != nil {
		return 0
	}
	return st.Size()
}

// countInLog counts lines containing what in the node's log after
// offset from.
func countInLog(dir, node string, from int64, what string) (int, error) {
	f, err := os.Open(filepath.Join(dir, node, "routed.log"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), what) {
			n++
		}
	}
	return n, sc.Err()
}

// etcdPID finds the lab's etcd among the PIDs the lab recorded: the one
// whose command line has --data-dir <dir>/etcd.
func etcdPID(dir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dir, "pids"))
	if err != nil {
		return 0, err
	}
	want := filepath.Join(dir, "etcd")
	for _, line := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(line)
		if err != nil {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cl), "\x00")
		for i, a := range args {
			if a == "--data-dir" && i+1 < len(args) && args[i+1] == want {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no etcd with --data-dir %s among the lab's processes", want)
}
