package daemon

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/spf13/pflag"
)

// TestHealthAndMetricsDefaultToLoopback: with no flag or environment,
// health and metrics listen on 127.0.0.1 (they were on every interface of
// a hostNetwork pod, unauthenticated).
func TestHealthAndMetricsDefaultToLoopback(t *testing.T) {
	t.Setenv("ROUTED_HEALTH_LISTEN", "")
	t.Setenv("ROUTED_METRICS_LISTEN", "")
	var c Config
	fs := pflag.NewFlagSet("routed", pflag.ContinueOnError)
	c.BindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	for name, addr := range map[string]string{"health": c.HealthAddr, "metrics": c.MetricsAddr} {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatalf("%s address %q: %v", name, addr, err)
		}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			t.Errorf("%s listens on %q by default, want a loopback address", name, addr)
		}
	}
}

// TestProbeFollowsReadiness: `routed health --readiness` (Probe) fails
// with the failing check's reason while routed is not ready and succeeds
// once it is.
func TestProbeFollowsReadiness(t *testing.T) {
	h := NewHealth()
	var ok atomic.Bool
	h.AddReadiness("bgp", func(context.Context) (bool, string) {
		if ok.Load() {
			return true, ""
		}
		return false, "session to 10.0.0.1 Active"
	})
	srv := httptest.NewServer(h.Handler())
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	err := Probe(context.Background(), addr, "/readiness")
	if !errors.Is(err, ErrProbe) || !strings.Contains(err.Error(), "session to 10.0.0.1 Active") {
		t.Fatalf("not ready: want ErrProbe with the reason, got %v", err)
	}
	if err := Probe(context.Background(), addr, "/liveness"); err != nil {
		t.Fatalf("liveness with no checks: %v", err)
	}
	ok.Store(true)
	if err := Probe(context.Background(), addr, "/readiness"); err != nil {
		t.Fatalf("ready: %v", err)
	}
	_, port, _ := net.SplitHostPort(addr)
	if err := Probe(context.Background(), ":"+port, "/readiness"); err != nil {
		t.Fatalf("address without host probes loopback: %v", err)
	}
}
