package health

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestProbeFollowsReadiness: `routed health --readiness` (Probe) fails
// with the failing check's reason while routed is not ready and succeeds
// once it is.
func TestProbeFollowsReadiness(t *testing.T) {
	h := New()
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
