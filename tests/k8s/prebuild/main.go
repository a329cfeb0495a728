// Command prebuild builds the kube-apiserver, the kube-node binary
// (kubelet, kube-controller-manager, kube-scheduler) and Kubernetes'
// NetworkPolicy e2e.test with agnhost, which the tests/k8s tier runs,
// into the test cache ahead of the tests (minutes on 2 cores the first
// time, nothing once cached), e.g. from a deps step:
//
//	go run ./tests/k8s/prebuild
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/routed-net/routed/tests/k8s/kubeapiserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "prebuild: "+format+"\n", a...) }
	for _, build := range []func(context.Context, string, string, func(string, ...any)) (string, error){kubeapiserver.Build, kubeapiserver.BuildNode} {
		bin, err := build(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, logf)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(bin)
	}
	e2e, agnhost, err := kubeapiserver.BuildE2E(ctx, kubeapiserver.CacheDir(), kubeapiserver.Version, logf)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(e2e)
	fmt.Println(agnhost)
}
