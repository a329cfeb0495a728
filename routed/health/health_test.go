package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/routed-net/routed/internal/heartbeat"
	"github.com/routed-net/routed/internal/testenv"
)

func probe(t *testing.T, h http.Handler, path string) (int, map[string]Result) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	var body map[string]Result
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("%s body %q: %v", path, rec.Body.String(), err)
	}
	return rec.Code, body
}

// TestReadinessIsComputedOnRequest: the answer follows the component at
// once (it used to be a sample up to 2 s old).
func TestReadinessIsComputedOnRequest(t *testing.T) {
	h := New()
	var ok atomic.Bool
	h.AddReadiness("thing", func(context.Context) (bool, string) {
		if ok.Load() {
			return true, ""
		}
		return false, "thing not ready"
	})
	srv := h.Handler()
	if code, body := probe(t, srv, "/readiness"); code != 503 || body["thing"].Detail != "thing not ready" {
		t.Fatalf("not ready: %d %+v", code, body)
	}
	ok.Store(true)
	if code, body := probe(t, srv, "/readiness"); code != 200 || !body["thing"].OK {
		t.Fatalf("ready: %d %+v", code, body)
	}
}

// TestLivenessFailsOnStalledLoop: liveness used to pass whatever
// happened; now a loop that stops beating makes it fail, and a check
// that hangs makes the probe answer 503 in bounded time, not hang.
func TestLivenessFailsOnStalledLoop(t *testing.T) {
	h := New()
	b := &heartbeat.Beat{}
	h.AddLiveness("loop", HeartbeatCheck(b, 300*time.Millisecond))
	srv := h.Handler()
	b.Mark()
	if code, _ := probe(t, srv, "/liveness"); code != 200 {
		t.Fatalf("fresh beat: %d", code)
	}
	testenv.Eventually(t, 5*time.Second, 50*time.Millisecond, func() string {
		if code, body := probe(t, srv, "/liveness"); code != 503 || body["loop"].Detail == "" {
			return fmt.Sprintf("stalled loop still live: %d %+v", code, body)
		}
		return ""
	})
	b.Mark()
	if code, _ := probe(t, srv, "/liveness"); code != 200 {
		t.Fatalf("loop going round again: %d", code)
	}

	h.AddLiveness("wedged", func(ctx context.Context) (bool, string) {
		<-ctx.Done()
		time.Sleep(time.Second) // wedged past the probe's deadline
		return true, ""
	})
	start := time.Now()
	code, body := probe(t, srv, "/liveness")
	if code != 503 || body["wedged"].Detail != "check timed out" || time.Since(start) > 2*checkTimeout {
		t.Fatalf("hanging check: %d %+v after %s", code, body, time.Since(start))
	}
}
