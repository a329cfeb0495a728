// Command k8s-cnp (make k8s-cnp) brings up the two-node cluster of `make
// k8s-demo` (tests/k8s/cluster), installs routed from the shipped
// manifests with its controllers (tests/k8s/demo.Install) and the
// ClusterNetworkPolicy CRD of deploy/crds, and runs the conformance
// tests of sigs.k8s.io/network-policy-api (tests/k8s/cnpconf) against
// it. It prints each failed test with what it saw, the skipped ones
// with their reason, every SCTP poke not made (this kernel has no
// SCTP) under the test it belongs to, and ends with the line `cnp: P
// passed (Q of them without their N SCTP pokes), F failed, S skipped`.
// It exits 1 when a test failed or the suite could not run, and tears
// everything down in every case, also on Ctrl-C.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/routed-net/routed/tests/k8s/cnpconf"
	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

func main() {
	bin := flag.String("bin", "bin", "directory with routed and routedctl")
	dir := flag.String("dir", "/tmp/routed-k8s-cnp", "cluster state, logs and the tests' output")
	run := flag.String("run", "", "go test -run regexp over the tests' names (default: all)")
	timeout := flag.Duration("timeout", 2*time.Hour, "the whole run")
	report := flag.String("report", "", "only read the output of an earlier run (DIR/conformance/conformance.json) and print its results")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	logf := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	var res cnpconf.Result
	var err error
	if *report != "" {
		res, err = cnpconf.ReadLog(*report)
	} else {
		res, err = runAll(ctx, *bin, *dir, *run, *timeout, logf)
	}
	for _, s := range append(append([]cnpconf.Spec{}, res.Passed...), res.Failed...) {
		if len(s.NotMade) > 0 {
			fmt.Printf("NOT MADE in %s: %d SCTP pokes\n    %s\n", s.Name, len(s.NotMade), strings.Join(s.NotMade, "\n    "))
		}
	}
	for _, s := range res.Skipped {
		fmt.Printf("SKIPPED %s\n    %s\n", s.Name, s.Message)
	}
	for _, s := range res.Failed {
		fmt.Printf("FAILED %s (%s)\n%s\n\n", s.Name, s.Duration.Round(time.Second), s.Message)
	}
	if res.Setup != "" {
		fmt.Printf("SETUP FAILED\n%s\n", res.Setup)
	}
	if res.Log != "" {
		fmt.Printf("the tests' output (go test2json): %s\n", res.Log)
	}
	if err != nil {
		fmt.Printf("FAIL: %v (logs in %s)\n", err, *dir)
	}
	fmt.Println(res.Summary())
	if err != nil || len(res.Failed) > 0 || res.Setup != "" {
		os.Exit(1)
	}
}

func runAll(ctx context.Context, bin, dir, run string, timeout time.Duration, logf func(string, ...any)) (cnpconf.Result, error) {
	root, _ := os.Getwd()
	bin, _ = filepath.Abs(bin)
	dir, _ = filepath.Abs(dir)
	_, agnhost, err := kubeapiserver.BuildE2E(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, logf)
	if err != nil {
		return cnpconf.Result{}, err
	}
	test, err := cnpconf.Build(ctx, kubeapiserver.CacheDir(), logf)
	if err != nil {
		return cnpconf.Result{}, err
	}
	c, down, err := demo.UpWithRouted(ctx, dir, root, bin, true, logf)
	defer down()
	if err != nil {
		return cnpconf.Result{}, err
	}
	logf("==> network-policy-api %s conformance tests (features %v) on %d nodes", cnpconf.Version, cnpconf.Features, len(c.Nodes))
	start := time.Now()
	res, err := cnpconf.Run(ctx, c, cnpconf.Config{Test: test, Agnhost: agnhost, Run: run, Dir: filepath.Join(dir, "conformance"), Timeout: timeout,
		Progress: func(f string, a ...any) {
			logf("  %s  "+f, append([]any{time.Since(start).Round(time.Second)}, a...)...)
		}})
	logf("==> the tests ran for %s", time.Since(start).Round(time.Second))
	return res, err
}
