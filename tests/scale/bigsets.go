package main

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// setTracker times tracked pods from their endpoint's write to their
// address in one named set of every real node's nftables: the source set
// of the tracking policy, which holds exactly the tracked pods' addresses
// (no other active rule selects them, see trackedApp). The kernel's
// nftables events give the time an address was added (to some set of
// that node's routed-policy table); a read of the named set every second
// confirms it is in that set, and times it itself when an event was
// missed.
type setTracker struct {
	nodes []string
	mu    sync.Mutex
	// added is, per node, when each address was last added to a set.
	added map[string]map[netip.Addr]time.Time
	// pending are tracked pods written and not yet in every node's set.
	pending map[netip.Addr]*trackedPod
	done    []*trackedPod
	target  map[string]string // node -> set name
	conns   map[string]*nftables.Conn
	mons    []*nftables.Monitor
	nss     []netns.NsHandle
	lost    map[string]int // monitor overruns per node
	wg      sync.WaitGroup
}

// trackedPod is one tracked pod's journey to the real nodes' sets.
type trackedPod struct {
	addr    netip.Addr
	written time.Time // just before its endpoint's write
	// acked is when etcd answered that write (zero until then): what
	// the write itself took is etcd's, not the nodes'.
	acked  time.Time
	seen   map[string]time.Duration
	polled map[string]bool // timed by a read of the set, not an event
	// sighted is when a read first found it in a node's set with no
	// event yet (its event may still be on its way to the harness).
	sighted map[string]time.Time
	// during says a real node was restarting while it was pending.
	during bool
}

var policyTable = &nftables.Table{Name: nftdp.DefaultTable, Family: nftables.TableFamilyIPv4}

// newSetTracker subscribes to every node's nftables element events.
func newSetTracker(nodes []string) (*setTracker, error) {
	t := &setTracker{nodes: nodes, added: map[string]map[netip.Addr]time.Time{}, pending: map[netip.Addr]*trackedPod{},
		target: map[string]string{}, conns: map[string]*nftables.Conn{}, lost: map[string]int{}}
	for _, name := range nodes {
		h, err := netns.GetFromName(name)
		if err != nil {
			t.stop()
			return nil, err
		}
		t.nss = append(t.nss, h)
		conn, err := nftables.New(nftables.WithNetNSFd(int(h)), nftables.AsLasting())
		if err != nil {
			t.stop()
			return nil, fmt.Errorf("%s: nftables: %w", name, err)
		}
		t.conns[name] = conn
		// felix's 256 MiB buffers: a restarted node programs every set
		// again at once (at 150,000 pods hundreds of thousands of
		// elements); in the default buffer (rmem_max) the harness lost
		// a batch of their events, and every pod pending then was
		// timed by a read of its set, up to a second late.
		mc, err := nftables.New(nftables.WithNetNSFd(int(h)), nftables.WithSockOptions(nftdp.BigBuffers))
		if err != nil {
			t.stop()
			return nil, fmt.Errorf("%s: nftables: %w", name, err)
		}
		mon := nftables.NewMonitor(nftables.WithMonitorAction(nftables.MonitorActionNew),
			nftables.WithMonitorObject(nftables.MonitorObjectElements), nftables.WithMonitorEventBuffer(1<<16))
		ch, err := mc.AddGenerationalMonitor(mon)
		if err != nil {
			t.stop()
			return nil, fmt.Errorf("%s: nftables events: %w", name, err)
		}
		t.added[name] = map[netip.Addr]time.Time{}
		t.mons = append(t.mons, mon)
		t.wg.Add(1)
		go t.consume(name, ch)
	}
	return t, nil
}

func (t *setTracker) consume(node string, ch <-chan *nftables.MonitorEvents) {
	defer t.wg.Done()
	for evs := range ch {
		now := time.Now()
		t.mu.Lock()
		for _, ev := range evs.Changes {
			if ev.Type == nftables.MonitorEventTypeOOB {
				t.lost[node]++
				continue
			}
			els, _ := ev.Data.([]nftables.SetElement)
			for _, el := range els {
				if a, ok := netip.AddrFromSlice(el.Key); ok && len(el.Key) == 4 {
					t.added[node][a] = now
				}
			}
		}
		t.mu.Unlock()
	}
}

// elements reads a node's set (nil, nil when it does not exist).
func (t *setTracker) elements(node, set string) (map[netip.Addr]bool, error) {
	c := t.conns[node]
	s, err := c.GetSetByName(policyTable, set)
	if err != nil {
		return nil, nil
	}
	els, err := c.GetSetElements(s)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]bool, len(els))
	for _, el := range els {
		if a, ok := netip.AddrFromSlice(el.Key); ok && len(el.Key) == 4 {
			out[a] = true
		}
	}
	return out, nil
}

// findTarget waits until some set of every node's table holds every
// address of want and names, per node, the one with the fewest others
// (the tracking policy's; a guard set holds them too, with more). It
// returns what it found for the report.
func (t *setTracker) findTarget(ctx context.Context, want map[netip.Addr]bool, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var summary []string
	for _, node := range t.nodes {
		for {
			name, have, extra, err := t.bestSet(node, want)
			if err != nil {
				return "", err
			}
			if have == len(want) && name != "" {
				t.mu.Lock()
				t.target[node] = name
				t.mu.Unlock()
				summary = append(summary, fmt.Sprintf("%s: %s (%d tracked, %d others)", node, name, have, extra))
				break
			}
			if time.Now().After(deadline) {
				return "", fmt.Errorf("%s: no set holds every tracked address after %s (best %q: %d of %d)", node, timeout, name, have, len(want))
			}
			if !sleep(ctx, 500*time.Millisecond) {
				return "", ctx.Err()
			}
		}
	}
	return fmt.Sprint(summary), nil
}

func (t *setTracker) bestSet(node string, want map[netip.Addr]bool) (name string, have, extra int, err error) {
	sets, err := t.conns[node].GetSets(policyTable)
	if err != nil {
		return "", 0, 0, nil // the table is not there yet
	}
	bestExtra := -1
	for _, s := range sets {
		if s.KeyType != nftables.TypeIPAddr {
			continue
		}
		els, err := t.elements(node, s.Name)
		if err != nil {
			return "", 0, 0, err
		}
		h := 0
		for a := range want {
			if els[a] {
				h++
			}
		}
		x := len(els) - h
		if h > have || (h == have && (bestExtra < 0 || x < bestExtra)) {
			name, have, extra, bestExtra = s.Name, h, x, x
		}
	}
	return name, have, extra, nil
}

// track registers a tracked pod just before its endpoint is written;
// call the function it returns when the write is acknowledged.
func (t *setTracker) track(a netip.Addr, restarting bool) (acked func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := &trackedPod{addr: a, written: time.Now(), seen: map[string]time.Duration{}, polled: map[string]bool{},
		sighted: map[string]time.Time{}, during: restarting}
	t.pending[a] = p
	return func() {
		t.mu.Lock()
		p.acked = time.Now()
		t.mu.Unlock()
	}
}

// markRestarting flags every pending pod as met by a restart.
func (t *setTracker) markRestarting() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.pending {
		p.during = true
	}
}

// poll reads every node's target set once and resolves what is in it.
func (t *setTracker) poll() error {
	for _, node := range t.nodes {
		t.mu.Lock()
		set := t.target[node]
		t.mu.Unlock()
		els, err := t.elements(node, set)
		if err != nil {
			return err
		}
		now := time.Now()
		t.mu.Lock()
		for a, p := range t.pending {
			if _, ok := p.seen[node]; ok || !els[a] {
				continue
			}
			at, ok := t.added[node][a]
			if !ok || at.Before(p.written) {
				// No event yet: give it until the next read, then
				// time it by the first read that found it.
				first, had := p.sighted[node]
				if !had {
					p.sighted[node] = now
					continue
				}
				at, p.polled[node] = first, true
			}
			p.seen[node] = at.Sub(p.written)
		}
		for a, p := range t.pending {
			if len(p.seen) == len(t.nodes) {
				t.done = append(t.done, p)
				delete(t.pending, a)
			}
		}
		t.mu.Unlock()
	}
	return nil
}

// run polls every second until ctx ends.
func (t *setTracker) run(ctx context.Context) error {
	for sleep(ctx, time.Second) {
		if err := t.poll(); err != nil {
			return err
		}
	}
	return nil
}

// latencyReport are the figures of the tracked pods resolved so far.
type latencyReport struct {
	samples, polled, missing, duringRestart int
	// all: to the last node's set; perNode: each node's.
	p50, p99, max   float64
	quietP50, quiet float64 // p50/p99 of pods no restart met
	// ackP50, ackQuiet: the same from etcd's answer to the write (0
	// for a node that had it sooner), without the pods a restart met.
	ackP50, ackQuiet float64
	quietN           int
	perNode          map[string][2]float64
	lostEventBatches int
}

// report summarises resolved pods; pods still pending count as missing.
func (t *setTracker) report() latencyReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	var r latencyReport
	r.perNode = map[string][2]float64{}
	var all, quiet, acked []float64
	per := map[string][]float64{}
	for _, p := range t.done {
		var last time.Duration
		for node, d := range p.seen {
			last = max(last, d)
			per[node] = append(per[node], ms(max(d, 0)))
			if p.polled[node] {
				r.polled++
			}
		}
		all = append(all, ms(last))
		if p.during {
			r.duringRestart++
		} else {
			quiet = append(quiet, ms(last))
			if !p.acked.IsZero() {
				acked = append(acked, ms(max(0, last-p.acked.Sub(p.written))))
			}
		}
	}
	r.samples, r.missing, r.quietN = len(all), len(t.pending), len(quiet)
	r.p50, r.p99, r.max = pct(all, 50), pct(all, 99), pct(all, 100)
	r.quietP50, r.quiet = pct(quiet, 50), pct(quiet, 99)
	r.ackP50, r.ackQuiet = pct(acked, 50), pct(acked, 99)
	for n := range per {
		r.perNode[n] = [2]float64{pct(per[n], 50), pct(per[n], 99)}
	}
	for _, n := range t.lost {
		r.lostEventBatches += n
	}
	return r
}

func (t *setTracker) stop() {
	for _, m := range t.mons {
		_ = m.Close()
	}
	t.mons = nil
	t.wg.Wait()
	for _, c := range t.conns {
		_ = c.CloseLasting()
	}
	for _, h := range t.nss {
		_ = h.Close()
	}
	t.nss = nil
}
