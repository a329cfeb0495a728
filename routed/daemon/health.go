package daemon

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"
)

// Health aggregates readiness reported by components. routed is ready
// when every registered component says so; it is live while no
// component has reported itself dead.
type Health struct {
	mu    sync.Mutex
	items map[string]healthItem
}

type healthItem struct {
	Ready  bool      `json:"ready"`
	Live   bool      `json:"live"`
	Detail string    `json:"detail,omitempty"`
	Since  time.Time `json:"since"`
}

// NewHealth returns an empty aggregator.
func NewHealth() *Health { return &Health{items: map[string]healthItem{}} }

// Register adds a component that starts live and not ready.
func (h *Health) Register(name string) {
	h.Report(name, true, false, "starting")
}

// Report records a component's state.
func (h *Health) Report(name string, live, ready bool, detail string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	old, ok := h.items[name]
	since := time.Now()
	if ok && old.Ready == ready && old.Live == live {
		since = old.Since
	}
	h.items[name] = healthItem{Ready: ready, Live: live, Detail: detail, Since: since}
}

// Ready reports whether every component is ready.
func (h *Health) Ready() bool { return h.check(func(i healthItem) bool { return i.Ready }) }

// Live reports whether every component is live.
func (h *Health) Live() bool { return h.check(func(i healthItem) bool { return i.Live }) }

func (h *Health) check(f func(healthItem) bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, i := range h.items {
		if !f(i) {
			return false
		}
	}
	return true
}

// Handler serves /liveness and /readiness with a JSON body listing each
// component, 200 when good and 503 when not.
func (h *Health) Handler() http.Handler {
	mux := http.NewServeMux()
	serve := func(ok func() bool) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			h.mu.Lock()
			names := make([]string, 0, len(h.items))
			for n := range h.items {
				names = append(names, n)
			}
			sort.Strings(names)
			body := make(map[string]healthItem, len(names))
			for _, n := range names {
				body[n] = h.items[n]
			}
			h.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			if !ok() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			_ = json.NewEncoder(w).Encode(body)
		}
	}
	mux.HandleFunc("/liveness", serve(h.Live))
	mux.HandleFunc("/readiness", serve(h.Ready))
	return mux
}
