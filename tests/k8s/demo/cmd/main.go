// Command k8s-demo (make k8s-demo) brings up a real one-node Kubernetes
// cluster on this machine (tests/k8s/cluster), installs routed from the
// shipped manifests and checks it as an operator would (tests/k8s/demo).
// Its last line is PASS or FAIL; it tears everything down in every case,
// also on Ctrl-C.
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
)

func main() {
	bin := flag.String("bin", "bin", "directory with routed and routedctl")
	dir := flag.String("dir", "/tmp/routed-k8s-demo", "cluster state and logs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	logf := func(format string, a ...any) { fmt.Printf(format+"\n", a...) }
	if err := run(ctx, *bin, *dir, logf); err != nil {
		fmt.Printf("FAIL: %v (logs in %s)\n", err, *dir)
		os.Exit(1)
	}
	fmt.Println("PASS: routed installed from the shipped manifests on two real kubelet + containerd nodes; 10 pods Running with pool addresses and WorkloadEndpoints, ipAddrs honoured, pod-to-pod ping across nodes over routed's BGP, the route reflector Deployment running as a pod and peering, addresses released, no files left")
}

func run(ctx context.Context, bin, dir string, logf func(string, ...any)) error {
	root, _ := os.Getwd()
	bin, _ = filepath.Abs(bin)
	c, err := demo.Up(ctx, dir, bin, logf)
	if c != nil {
		defer func() {
			logf("==> tearing the cluster down")
			c.Down()
		}()
	}
	if err != nil {
		return err
	}
	return demo.Run(ctx, c, root, bin, logf)
}
