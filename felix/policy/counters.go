package policy

import (
	"sort"
	"time"

	"github.com/routed-net/routed/felix/policy/nftdp"
)

// RuleCounter is one rule's kernel counter and when it last matched.
type RuleCounter struct {
	// ID is the rule ID (see Manager.Counters).
	ID             string
	Packets, Bytes uint64
	// LastHit is the time of the first read that saw the counter grow
	// (or restart from zero and grow: its chain was rewritten) since
	// the read before it; zero when it has not grown while watched.
	// nftables keeps no per-rule timestamp that this library can read,
	// so the precision is the interval between reads.
	LastHit time.Time
	// HitBefore is set when the counter already held packets at the
	// first read: it matched at some time before WatchedSince.
	HitBefore bool
}

// CounterWatch derives each rule's last hit from its counter changing
// between reads (felix reads periodically and whenever asked). It is
// used from one goroutine.
type CounterWatch struct {
	read func() (map[string]nftdp.Counter, error)
	// WatchedSince is the time of the first successful read.
	WatchedSince time.Time
	prev         map[string]RuleCounter
}

// NewCounterWatch watches the counters read returns.
func NewCounterWatch(read func() (map[string]nftdp.Counter, error)) *CounterWatch {
	return &CounterWatch{read: read}
}

// Read reads the counters now and returns them, sorted by ID, with
// their last hits.
func (w *CounterWatch) Read(now time.Time) ([]RuleCounter, error) {
	m, err := w.read()
	if err != nil {
		return nil, err
	}
	first := w.prev == nil
	if first {
		w.WatchedSince = now
	}
	next := make(map[string]RuleCounter, len(m))
	for id, c := range m {
		rc := RuleCounter{ID: id, Packets: c.Packets, Bytes: c.Bytes}
		old, seen := w.prev[id]
		switch {
		case first:
			rc.HitBefore = c.Packets > 0
		case !seen:
			// A rule that appeared since the last read: its packets
			// came after that read.
			if c.Packets > 0 {
				rc.LastHit = now
			}
		case c.Packets > old.Packets || (c.Packets < old.Packets && c.Packets > 0):
			rc.LastHit, rc.HitBefore = now, old.HitBefore
		default:
			rc.LastHit, rc.HitBefore = old.LastHit, old.HitBefore
		}
		next[id] = rc
	}
	w.prev = next
	out := make([]RuleCounter, 0, len(next))
	for _, rc := range next {
		out = append(out, rc)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
