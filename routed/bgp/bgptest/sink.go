// Package bgptest holds helpers for routed's BGP tests: a RouteSink that
// records what it is told, a lab of network namespaces joined by a
// bridge, runners for BIRD and gobgpd as test peers, child processes
// running a speaker inside a namespace, and a check that the peers'
// commands are installed.
package bgptest

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"time"
)

// Recorder is a bgp.RouteSink (and bgp.RouteStatus) that records the
// routes it holds and every call, safe for concurrent use.
type Recorder struct {
	mu        sync.Mutex
	routes    map[netip.Prefix]netip.Addr
	priority  map[netip.Prefix]uint32
	updates   int
	withdraws map[netip.Prefix]int
	changed   chan struct{}
	// seen records when a prefix was first added (for latency benches).
	seen map[netip.Prefix]time.Time
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{
		routes: map[netip.Prefix]netip.Addr{}, priority: map[netip.Prefix]uint32{}, withdraws: map[netip.Prefix]int{},
		changed: make(chan struct{}), seen: map[netip.Prefix]time.Time{},
	}
}

// RouteUpdate implements bgp.RouteSink.
func (r *Recorder) RouteUpdate(p netip.Prefix, nh, _ netip.Addr, priority uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.routes[p]; !ok {
		r.seen[p] = time.Now()
	}
	r.routes[p] = nh
	r.priority[p] = priority
	r.updates++
	r.notify()
}

// RouteWithdraw implements bgp.RouteSink.
func (r *Recorder) RouteWithdraw(p netip.Prefix) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.routes[p]; ok {
		r.withdraws[p]++
	}
	delete(r.routes, p)
	delete(r.priority, p)
	delete(r.seen, p)
	r.notify()
}

// Priority is the route priority the route for p was last given (0 when
// the recorder does not hold it).
func (r *Recorder) Priority(p netip.Prefix) uint32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.priority[p]
}

// Programmed implements bgp.RouteStatus: a route counts as programmed
// while the recorder holds it.
func (r *Recorder) Programmed(p netip.Prefix) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.routes[p]
	return ok
}

// Filtered implements bgp.RouteStatus: the recorder filters nothing.
func (r *Recorder) Filtered(netip.Prefix) string { return "" }

func (r *Recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Routes returns a copy of the routes held.
func (r *Recorder) Routes() map[netip.Prefix]netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.routes)
}

// Withdrawals returns how often each prefix was withdrawn while held.
func (r *Recorder) Withdrawals() map[netip.Prefix]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.withdraws)
}

// FirstSeen returns when p was added, if it is held.
func (r *Recorder) FirstSeen(p netip.Prefix) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.seen[p]
	return t, ok
}

// WaitFor blocks until cond holds on the routes, or ctx ends.
func (r *Recorder) WaitFor(ctx context.Context, cond func(map[netip.Prefix]netip.Addr) bool) error {
	for {
		r.mu.Lock()
		ok := cond(r.routes)
		ch := r.changed
		snap := maps.Clone(r.routes)
		r.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("routes never matched; last %v: %w", snap, ctx.Err())
		case <-ch:
		}
	}
}

// Has returns a condition: p is held with next hop nh.
func Has(p netip.Prefix, nh netip.Addr) func(map[netip.Prefix]netip.Addr) bool {
	return func(m map[netip.Prefix]netip.Addr) bool { got, ok := m[p]; return ok && got == nh }
}

// Lacks returns a condition: p is not held.
func Lacks(p netip.Prefix) func(map[netip.Prefix]netip.Addr) bool {
	return func(m map[netip.Prefix]netip.Addr) bool { _, ok := m[p]; return !ok }
}
