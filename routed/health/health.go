// Package health answers routed's /readiness and /liveness from checks computed
// on request, and probes them (the container's exec probe).
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/routed-net/routed/internal/heartbeat"
)

// Check reports whether one part of routed is fine, and if not why.
type Check func(ctx context.Context) (ok bool, detail string)

// Health answers /liveness and /readiness by running its checks when
// asked, so an answer is never older than the request. Readiness checks
// say whether the node can serve (datastore, dataplane, BGP); liveness
// checks say whether its loops still go round (a stalled loop is only
// cured by a restart).
type Health struct {
	mu    sync.Mutex
	ready []namedCheck
	live  []namedCheck
	// since remembers when each check last changed, for the body.
	since map[string]state
}

type namedCheck struct {
	name string
	f    Check
}

type state struct {
	ok    bool
	since time.Time
}

// checkTimeout bounds one check, so a wedged component cannot hang the
// probe (the probe then says why).
const checkTimeout = 2 * time.Second

// New returns a Health with no checks (always ready and live).
func New() *Health { return &Health{since: map[string]state{}} }

// AddReadiness adds a readiness check.
func (h *Health) AddReadiness(name string, f Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ready = append(h.ready, namedCheck{name, f})
}

// AddLiveness adds a liveness check.
func (h *Health) AddLiveness(name string, f Check) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.live = append(h.live, namedCheck{name, f})
}

// HeartbeatCheck fails once b has not beaten for max: the loop marking
// it has stalled. Before the first beat it allows max from now (start-up).
func HeartbeatCheck(b *heartbeat.Beat, max time.Duration) Check {
	start := time.Now()
	return func(context.Context) (bool, string) {
		now := time.Now()
		age, ok := b.Age(now)
		if !ok {
			if waited := now.Sub(start); waited > max {
				return false, fmt.Sprintf("loop never ran in %s", waited.Round(time.Second))
			}
			return true, "starting"
		}
		if age > max {
			return false, fmt.Sprintf("loop stalled: last went round %s ago (limit %s)", age.Round(time.Second), max)
		}
		return true, ""
	}
}

// Result is one check's answer in a probe's body.
type Result struct {
	OK     bool      `json:"ok"`
	Detail string    `json:"detail,omitempty"`
	Since  time.Time `json:"since"`
}

// run evaluates checks (in parallel, each bounded) and reports whether
// all passed.
func (h *Health) run(ctx context.Context, checks []namedCheck) (bool, map[string]Result) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	type answer struct {
		ok     bool
		detail string
	}
	answers := make([]answer, len(checks))
	var wg sync.WaitGroup
	for i, c := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan answer, 1)
			go func() {
				ok, d := c.f(ctx)
				done <- answer{ok, d}
			}()
			select {
			case a := <-done:
				answers[i] = a
			case <-ctx.Done():
				answers[i] = answer{false, "check timed out"}
			}
		}()
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	all := true
	out := make(map[string]Result, len(checks))
	now := time.Now()
	for i, c := range checks {
		a := answers[i]
		all = all && a.ok
		st, seen := h.since[c.name]
		if !seen || st.ok != a.ok {
			st = state{ok: a.ok, since: now}
			h.since[c.name] = st
		}
		out[c.name] = Result{OK: a.ok, Detail: a.detail, Since: st.since}
	}
	return all, out
}

// Ready runs the readiness checks now.
func (h *Health) Ready(ctx context.Context) (bool, map[string]Result) {
	h.mu.Lock()
	checks := append([]namedCheck(nil), h.ready...)
	h.mu.Unlock()
	return h.run(ctx, checks)
}

// Live runs the liveness checks now.
func (h *Health) Live(ctx context.Context) (bool, map[string]Result) {
	h.mu.Lock()
	checks := append([]namedCheck(nil), h.live...)
	h.mu.Unlock()
	return h.run(ctx, checks)
}

// Handler serves /liveness and /readiness: 200 or 503, with a JSON body
// giving each check's answer.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	serve := func(probe func(context.Context) (bool, map[string]Result)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			ok, body := probe(r.Context())
			w.Header().Set("Content-Type", "application/json")
			if !ok {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			_ = json.NewEncoder(w).Encode(body)
		}
	}
	mux.HandleFunc("/liveness", serve(h.Live))
	mux.HandleFunc("/readiness", serve(h.Ready))
	return mux
}
