package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
)

// gcProc is routed cluster-gc run beside the real nodes (-cluster-gc
// process, as deploy/base runs it): the cluster-wide GC pass in a
// process of its own, at production's period and grace, in the router's
// namespace (where etcd is).
type gcProc struct {
	cmd         *exec.Cmd
	done        chan struct{}
	idle, after procMem
	peakAnon    int64
}

func (b *bigRun) startClusterGC() error {
	args := []string{"netns", "exec", b.l.Topo.RouterNS(), b.bins.Routed, "cluster-gc",
		"--name", bigPrefix + "-cluster-gc", "--etcd-endpoints", b.l.Topo.EtcdEndpoint()}
	cmd, done, err := startProc(b.dir, filepath.Join(b.dir, "cluster-gc.log"), args)
	if err != nil {
		return err
	}
	b.gc = &gcProc{cmd: cmd, done: done}
	fmt.Printf("==> routed cluster-gc started (the nodes run with --cluster-gc=false)\n")
	return nil
}

func (g *gcProc) running() bool {
	if g == nil {
		return false
	}
	select {
	case <-g.done:
		return false
	default:
		return true
	}
}

// sample reads its memory into m and keeps the peak; an exited process
// is an error: the run's figures would leave the pass out.
func (g *gcProc) sample(m *procMem) error {
	if !g.running() {
		return fmt.Errorf("routed cluster-gc exited; see cluster-gc.log")
	}
	got, err := readMem(g.cmd.Process.Pid)
	if err != nil {
		return err
	}
	if m != nil {
		*m = got
	}
	g.peakAnon = max(g.peakAnon, got.Anon)
	return nil
}

func (g *gcProc) stop() {
	if g.running() {
		stopProc(g.cmd, g.done)
	}
}

// report is its line of the report.
func (g *gcProc) report() string {
	return fmt.Sprintf("routed cluster-gc (the cluster-wide GC pass, off the nodes): anonymous idle %.1f MiB, after churn %.1f MiB, peak %.1f MiB; file-backed %.1f MiB",
		mib(g.idle.Anon), mib(g.after.Anon), mib(g.peakAnon), mib(g.idle.File))
}
