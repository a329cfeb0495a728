package flowrec

import (
	"context"
	"time"
)

// tickEvery is how often, at most, the loop decides the connections
// whose grace ended (and checks whether the interval ended): under load
// they fall due continuously, and one pass each tick costs less than a
// wake-up for each.
const tickEvery = 100 * time.Millisecond

// ctSource is where the loop reads conntrack events (the collector's
// ctSock; tests feed a channel). Only the loop's goroutine calls it,
// but poke.
type ctSource interface {
	// read hands the events queued now to fn, without waiting: how
	// many, and whether more may be queued.
	read(fn func(*ctEvent)) (n int, full bool)
	// arm prepares a wait that ends at until; from then on a poke
	// ends it at once, even one that comes before the wait.
	arm(until time.Time)
	// wait blocks until events may be queued, the armed time passed
	// or poke was called; a source that waits on marks itself
	// returns the mark it took.
	wait(marks <-chan mark) (mark, bool)
	// poke ends a wait; any goroutine may call it.
	poke()
	// settle lets events gather after a read that found some but not
	// a full batch (ctBatchWait for the socket).
	settle()
}

// loop owns the collector's state: it reads conntrack events from src
// and marks from the channel and decides connections when they fall
// due, until ctx ends.
//
// One goroutine does it all: it reads a batch of events and handles
// it on the same wake-up (a reader goroutine handing batches over cost
// a second wake-up per batch). While events come it reads every
// ctBatchWait; once the socket is empty it waits for it in poll(2)
// beside an eventfd (ctSock.wait; not in Go's network poller, which
// would wake for every event), with the next due time as the timeout,
// so an idle collector wakes when something falls due, not at every
// tick. Marks come from
// the nflog reader's goroutine through a channel: it pokes the loop
// only while the loop waits (parked), once per wait.
func (c *Collector) loop(ctx context.Context, marks <-chan mark, src ctSource) error {
	c.start = time.Now()
	stop := context.AfterFunc(ctx, src.poke)
	defer stop()
	lastTick := c.start
	for {
		// Events and marks queued go before the timers: a connection
		// is not decided on its grace while its NEW or its marks
		// wait (a collector behind would count such a connection
		// twice, once on its marks alone and once on its NEW).
		n, full := src.read(c.onConntrack)
		c.drainMarks(marks)
		now := time.Now()
		if ctx.Err() != nil {
			c.flush(now)
			return ctx.Err()
		}
		if now.Sub(lastTick) >= tickEvery {
			lastTick = now
			c.finalize(now)
			if now.Sub(c.start) >= c.cfg.Interval {
				c.flush(now)
			}
		}
		if n > 0 {
			if !full {
				src.settle()
			}
			continue
		}
		src.arm(c.nextWake(lastTick))
		c.parked.Store(true)
		// A mark sent before parked was set found the loop awake: it
		// is in the channel now. One sent after pokes.
		if c.drainMarks(marks) == 0 && ctx.Err() == nil {
			if m, ok := src.wait(marks); ok {
				c.onMark(m)
			}
		}
		c.parked.Store(false)
	}
}

// wakeLoop is the mark reader's side of parked: it ends the loop's
// wait after a mark was queued.
func (c *Collector) wakeLoop(src ctSource) {
	if c.parked.Load() && c.parked.CompareAndSwap(true, false) {
		src.poke()
	}
}

// drainMarks handles the marks queued (at most twice the channel's
// room, so that a flood cannot hold the loop) and says how many.
func (c *Collector) drainMarks(marks <-chan mark) int {
	for n := 0; n < 2*cap(marks)+1; n++ {
		select {
		case m := <-marks:
			c.onMark(m)
		default:
			return n
		}
	}
	return 2*cap(marks) + 1
}

// nextWake is when the loop must wake with no events: the earliest due
// connection or the interval's end, but not before the next tick.
func (c *Collector) nextWake(lastTick time.Time) time.Time {
	next := c.start.Add(c.cfg.Interval)
	for _, q := range []*dueQueue{&c.waiting, &c.suppressed} {
		if at, ok := q.next(); ok && at.Before(next) {
			// afterDue wants now past at.
			next = at.Add(time.Millisecond)
		}
	}
	return later(next, lastTick.Add(tickEvery))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
