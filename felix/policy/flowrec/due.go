package flowrec

import "time"

// dueQueue holds pending connections in the order they fall due: the
// end of the grace of those awaiting marks, or of the suppression of
// denied ones. finalize takes what is due from its front, so a tick
// costs what it decides, not a walk of every pending connection (at
// 10,000 connections a second, 4,000 of them wait out a 400 ms grace:
// a walk each 100 ms tick cost more than everything else the collector
// does per connection).
//
// An entry names its connection's pending entry and the generation it
// had when queued; a connection decided, suppressed or forgotten since
// moved to the next generation (pending.gen), so its entry is stale
// and skipped. Due times are kept in order: one earlier than the
// entry before it (a mark stamped after a conntrack batch it was
// processed before) is due with that entry, a few milliseconds late.
type dueQueue struct {
	q    []dueEntry
	head int
}

type dueEntry struct {
	at  time.Time
	p   *pending
	gen uint64
}

// push queues p (at its current generation) to fall due at at.
func (d *dueQueue) push(p *pending, at time.Time) {
	if n := len(d.q); n > d.head && at.Before(d.q[n-1].at) {
		at = d.q[n-1].at
	}
	d.q = append(d.q, dueEntry{at: at, p: p, gen: p.gen})
}

// pop returns the next live entry due by now (due(at, now) says
// whether at is), skipping stale ones.
func (d *dueQueue) pop(now time.Time, due func(at, now time.Time) bool) (*pending, bool) {
	for d.head < len(d.q) {
		e := &d.q[d.head]
		if e.p.gen != e.gen {
			d.q[d.head] = dueEntry{}
			d.head++
			continue
		}
		if !due(e.at, now) {
			break
		}
		p := e.p
		d.q[d.head] = dueEntry{}
		d.head++
		return p, true
	}
	d.trim()
	return nil, false
}

// trim gives back the room of the entries taken: an emptied queue
// starts again (a big one's array is freed), and one mostly taken
// moves its entries down.
func (d *dueQueue) trim() {
	switch n := len(d.q) - d.head; {
	case n == 0 && cap(d.q) > 4096:
		d.q, d.head = nil, 0
	case n == 0:
		d.q, d.head = d.q[:0], 0
	case d.head > n && d.head >= 1024:
		copy(d.q, d.q[d.head:])
		clear(d.q[n:])
		d.q, d.head = d.q[:n], 0
	}
}

// compact drops stale entries once they outnumber live ones (live:
// how many connections may still have an entry), so that connections
// decided before their grace ended do not hold the queue's memory for
// the grace.
func (d *dueQueue) compact(live int) {
	if len(d.q)-d.head <= 2*live+1024 {
		return
	}
	j := 0
	for _, e := range d.q[d.head:] {
		if e.p.gen == e.gen {
			d.q[j] = e
			j++
		}
	}
	clear(d.q[j:])
	d.q, d.head = d.q[:j], 0
}

// len is how many entries (live or stale) are queued.
func (d *dueQueue) len() int { return len(d.q) - d.head }

// next is the due time of the front entry (live or stale: a stale
// one's time is early, never late).
func (d *dueQueue) next() (time.Time, bool) {
	if d.head < len(d.q) {
		return d.q[d.head].at, true
	}
	return time.Time{}, false
}
