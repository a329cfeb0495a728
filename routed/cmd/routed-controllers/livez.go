package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/routed-net/routed/routed/controllers"
)

// livezTolerance is how long past the Lease's duration a leader that has
// not renewed stays live (client-go's HealthzAdaptor timeout, as
// kube-controller-manager gives it).
const livezTolerance = 20 * time.Second

// runWithLivez runs the controllers and, beside them, /livez on addr:
// cfg.WatchDog's check. It ends when the controllers do.
func runWithLivez(ctx context.Context, addr string, cfg controllers.Config) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--health-listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) {
		if err := cfg.WatchDog.Check(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	runErr := controllers.Run(ctx, cfg)
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) && runErr == nil {
		runErr = fmt.Errorf("/livez on %s: %w", addr, err)
	}
	return runErr
}
