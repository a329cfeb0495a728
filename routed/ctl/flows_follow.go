package ctl

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/routed/flowagg"
)

// Reconnection backoff while following.
const (
	followMinBackoff = 500 * time.Millisecond
	followMaxBackoff = 10 * time.Second
)

// readFlows gives fn the entries of the aggregator's window that f
// keeps. Following, it reconnects with backoff when the stream breaks
// or the aggregator restarts (saying so on notice), and resumes after
// the last entry it gave fn (resume); it ends when ctx does, or at an
// error a retry would meet again. The first connection is not retried:
// an aggregator that cannot be reached at all is an error to report,
// not to wait out.
func readFlows(ctx context.Context, c *flowsClient, f flowagg.Filter, follow bool, notice io.Writer, fn func(flowagg.Entry) error) error {
	q := f.Query()
	if follow {
		q.Set("follow", "1")
	}
	var (
		pos       resume
		connected bool
		fnErr     error
		pace      = backoff.New(followMinBackoff, followMaxBackoff)
		broken    error // why the last stream ended, while reconnecting
	)
	for {
		got, began := false, time.Now()
		take := func(e flowagg.Entry) error {
			got = true
			fnErr = pos.take(e, fn)
			return fnErr
		}
		err := c.stream(ctx, q, func() {
			if broken != nil {
				fmt.Fprintf(notice, "routedctl flows: reconnected to the aggregator at %s; %s\n", c.addr, pos.describe())
				broken = nil
			}
			connected = true
			pos.reconnected()
		}, take)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case fnErr != nil:
			return fnErr
		case !follow:
			return err
		case err == nil:
			err = fmt.Errorf("the aggregator at %s ended the stream (it is stopping or restarting)", c.addr)
		}
		if !connected || !retryable(err) {
			return err
		}
		if got || time.Since(began) > followMaxBackoff {
			pace.Reset() // a stream that served: the next loss starts again from the floor
		}
		if broken == nil {
			fmt.Fprintf(notice, "routedctl flows: lost the stream: %v; reconnecting (Ctrl-C to stop)\n", err)
		} else if err.Error() != broken.Error() {
			fmt.Fprintf(notice, "routedctl flows: reconnecting: %v\n", err)
		}
		broken = err
		if !pace.Wait(ctx) {
			return ctx.Err()
		}
	}
}

// resume keeps a follower's place: the last entry with a sequence
// number it printed. The aggregator serves each stream from the start
// of its window, so after a reconnection the entries up to that one are
// skipped, once it is found again. Not found, the aggregator restarted
// (its numbers begin again at 1) or evicted it, and a gap says what may
// be missing.
type resume struct {
	last    flowagg.Entry // Seq 0: nothing printed yet
	finding bool          // this stream is before last, or has not shown where it is
	first   bool          // no entry of this stream seen yet
}

// reconnected starts a new stream.
func (r *resume) reconnected() {
	r.finding, r.first = r.last.Seq != 0, true
}

func (r *resume) describe() string {
	if r.last.Seq == 0 {
		return "nothing printed yet"
	}
	return fmt.Sprintf("resuming after entry %d", r.last.Seq)
}

// take prints e unless it was printed before, after a gap when entries
// between the last printed and e may be missing.
func (r *resume) take(e flowagg.Entry, fn func(flowagg.Entry) error) error {
	if e.Seq == 0 {
		// A gap the aggregator wrote for this stream: entries that left
		// the window before it asked. While finding last, those left
		// before the window's start, so either before last (printed)
		// or, if last is gone too, within the gap printed below.
		if r.finding {
			return nil
		}
		return fn(e) // a follower that fell behind: news
	}
	first := r.first
	r.first = false
	if r.finding {
		l := r.last
		switch {
		case e.Seq == 1 && e.Gap != nil && e.Gap.Reason == flowagg.GapAggregator && e.Received.After(l.Received):
			// A new aggregator's start, after what was printed: its own
			// gap says nothing before it is held.
			r.finding = false
		case e.Seq < l.Seq:
			return nil // printed before, unless the aggregator restarted (found out below)
		case e.Seq == l.Seq && e.Received.Equal(l.Received):
			r.finding = false
			return nil // found: the next entries are new
		case e.Seq == l.Seq:
			// The same number for another entry: a new aggregator, whose
			// start (and entries skipped up to here) is out of its window.
			r.finding = false
			if err := fn(gapSince(l, e, flowagg.GapAggregator)); err != nil {
				return err
			}
		case first && e.Seq == l.Seq+1:
			r.finding = false // the very next entry: nothing missing
		case first:
			// last is out of the window: evicted (or a restarted
			// aggregator's); what came between may be missing.
			r.finding = false
			g := gapSince(l, e, flowagg.GapEvicted)
			g.Gap.Evicted = e.Seq - l.Seq - 1
			if err := fn(g); err != nil {
				return err
			}
		default:
			// Past last without it, having skipped earlier numbers: not
			// the window it was printed from.
			r.finding = false
			if err := fn(gapSince(l, e, flowagg.GapAggregator)); err != nil {
				return err
			}
		}
	}
	if err := fn(e); err != nil {
		return err
	}
	r.last = e
	return nil
}

// gapSince is the gap for all nodes between the last entry printed and
// the next.
func gapSince(last, next flowagg.Entry, reason string) flowagg.Entry {
	return flowagg.Entry{Received: time.Now(), Gap: &flowagg.Gap{Node: "*", From: last.Received, To: next.Received, Reason: reason}}
}
