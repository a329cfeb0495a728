// Command k8s-enforce (make k8s-policy-bench, make k8s-enforce) brings
// up the two-node cluster of `make k8s-demo` (tests/k8s/cluster),
// installs routed from the shipped manifests with its controllers
// (tests/k8s/demo.Install), and then, with probes sent from the pods'
// own network namespaces (tests/k8s/enforce):
//
//   - -bench N: times N NetworkPolicy creations, N deletions and N pod
//     label changes to their new verdict on both nodes and prints p50,
//     p90, p99 and max of each;
//   - -checks: the pod-start and restart-order checks.
//
// It exits 1 when a check failed or the run could not finish, and tears
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

	"github.com/routed-net/routed/tests/k8s/demo"
	"github.com/routed-net/routed/tests/k8s/enforce"
)

func main() {
	bin := flag.String("bin", "bin", "directory with routed and routedctl")
	dir := flag.String("dir", "/tmp/routed-k8s-enforce", "cluster state and logs")
	bench := flag.Int("bench", 0, "time this many changes of each kind (0: no benchmark)")
	checks := flag.Bool("checks", false, "run the pod-start and restart-order checks")
	timeout := flag.Duration("timeout", 40*time.Minute, "the whole run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	logf := func(format string, a ...any) {
		fmt.Printf("%s "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05.000")}, a...)...)
	}
	if err := run(ctx, *bin, *dir, *bench, *checks, logf); err != nil {
		fmt.Printf("FAIL: %v (logs in %s)\n", err, *dir)
		os.Exit(1)
	}
	fmt.Println("PASS")
}

func run(ctx context.Context, bin, dir string, n int, checks bool, logf func(string, ...any)) error {
	root, _ := os.Getwd()
	bin, _ = filepath.Abs(bin)
	dir, _ = filepath.Abs(dir)
	start := time.Now()
	c, down, err := demo.UpWithRouted(ctx, dir, root, bin, false, logf)
	defer down()
	if err != nil {
		return err
	}
	logf("==> cluster up and routed installed in %s", time.Since(start).Round(time.Second))
	e, err := enforce.NewEnv(c, bin, logf)
	if err != nil {
		return err
	}
	if n > 0 {
		logf("==> enforcement time: %d policy creations and deletions, %d label changes, probes every 20 ms per pair from the pods' namespaces", n, n)
		f, err := e.NewFixture(ctx, "bench")
		if err != nil {
			return err
		}
		defer f.Close()
		load, _ := os.ReadFile("/proc/loadavg")
		logf("load before: %s", strings.TrimSpace(string(load)))
		res, err := e.Bench(ctx, f, n)
		load, _ = os.ReadFile("/proc/loadavg")
		logf("load after: %s", strings.TrimSpace(string(load)))
		for _, l := range []string{
			enforce.Summary("policy created (deny)", res.Apply), enforce.Summary("policy deleted (allow)", res.Delete),
			enforce.Summary("label added (allow)", res.LabelAllow), enforce.Summary("label removed (deny)", res.LabelDeny),
			enforce.Summary("label, both", append(append([]time.Duration(nil), res.LabelAllow...), res.LabelDeny...)),
			enforce.Summary("policy, both", append(append([]time.Duration(nil), res.Apply...), res.Delete...)),
		} {
			fmt.Println(l)
		}
		fmt.Printf("flaps (a probe saw the new verdict before an old one again): %d; probes dropped for a SYN time known to less than 10 ms: %d\n",
			res.Flaps, res.Imprecise)
		if err != nil {
			return err
		}
	}
	if checks {
		if err := e.Checks(ctx); err != nil {
			return err
		}
	}
	return nil
}
