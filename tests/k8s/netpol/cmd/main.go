// Command k8s-netpol (make k8s-netpol) brings up the two-node cluster of
// `make k8s-demo` (tests/k8s/cluster), installs routed from the shipped
// manifests with its controllers (tests/k8s/demo.Install) and the
// ClusterNetworkPolicy CRD of deploy/crds, and runs
// Kubernetes' own NetworkPolicy specs against it (tests/k8s/netpol):
// e2e.test and agnhost built from k8s.io/kubernetes at the cluster's
// version, -parallel specs at a time. It prints each failed spec with its probe matrices, the
// skipped ones with their reason, and ends with the line
// `netpol: P passed, F failed, S skipped`. It exits 1 when a spec
// failed or the suite could not run, and tears everything down in every
// case, also on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
	"github.com/routed-net/routed/tests/k8s/netpol"
)

func main() {
	bin := flag.String("bin", "bin", "directory with routed and routedctl")
	dir := flag.String("dir", "/tmp/routed-k8s-netpol", "cluster state, logs and the suite's report")
	focus := flag.String("focus", "", "ginkgo focus regexp over the specs' names (default: every Netpol spec, "+netpol.Focus+")")
	timeout := flag.Duration("timeout", 3*time.Hour, "the whole run")
	parallel := flag.Int("parallel", 2, "specs run at once, each in an e2e.test process of its own")
	report := flag.String("report", "", "only read the reports of an earlier run (DIR/e2e/report) and print its results")
	passedIn := flag.String("passed-in", "", "an earlier run's reports (a copy of its DIR/e2e/report): the specs that passed there are not run again and count as passed, named apart")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	logf := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	var res netpol.Result
	var err error
	if *report != "" {
		res, err = netpol.ReadReports(*report)
	} else {
		var earlier *netpol.Result
		if *passedIn != "" {
			e, rerr := netpol.ReadReports(*passedIn)
			if rerr != nil {
				fmt.Printf("FAIL: -passed-in: %v\n", rerr)
				os.Exit(1)
			}
			earlier = &e
		}
		res, err = run(ctx, *bin, *dir, orDefault(*focus, netpol.Focus), *timeout, *parallel, earlier, logf)
	}
	for _, s := range res.Skipped {
		fmt.Printf("SKIPPED %s\n    %s\n", s.Name, s.Message)
	}
	for _, s := range res.PassedEarlier {
		fmt.Printf("PASSED EARLIER %s (%s)\n", s.Name, res.EarlierLog)
	}
	for _, s := range res.NotRun {
		fmt.Printf("NOT RUN %s\n", s.Name)
	}
	for _, s := range res.Failed {
		fmt.Printf("FAILED %s (%s)\n%s\n\n", s.Name, s.Duration.Round(time.Second), s.Message)
	}
	if res.Log != "" {
		fmt.Printf("each spec's report and output: %s/NNN\n", res.Log)
	}
	if err != nil {
		fmt.Printf("FAIL: %v (logs in %s)\n", err, *dir)
	}
	fmt.Println(res.Summary())
	if err != nil || len(res.Failed) > 0 || len(res.NotRun) > 0 {
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, dir, focus string, timeout time.Duration, parallel int, earlier *netpol.Result, logf func(string, ...any)) (netpol.Result, error) {
	root, _ := os.Getwd()
	bin, _ = filepath.Abs(bin)
	dir, _ = filepath.Abs(dir)
	e2e, agnhost, err := kubeapiserver.BuildE2E(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, logf)
	if err != nil {
		return netpol.Result{}, err
	}
	c, down, err := demo.UpWithRouted(ctx, dir, root, bin, true, logf)
	defer down()
	if err != nil {
		return netpol.Result{}, err
	}
	logf("==> Kubernetes %s NetworkPolicy specs (e2e.test --ginkgo.focus %q) on %d nodes, %d at a time", kubeapiserver.Version, focus, len(c.Nodes), parallel)
	start := time.Now()
	res, err := netpol.Run(ctx, c, netpol.Config{E2E: e2e, Agnhost: agnhost, Focus: focus, Dir: filepath.Join(dir, "e2e"), Timeout: timeout, Parallel: parallel, PassedEarlier: earlier,
		Progress: func(f string, a ...any) {
			logf("  %s  "+f, append([]any{time.Since(start).Round(time.Second)}, a...)...)
		}})
	logf("==> the specs ran for %s", time.Since(start).Round(time.Second))
	return res, err
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
