package flowrec

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/routed-net/routed/felix/policy/flowlog"
	"github.com/routed-net/routed/internal/backoff"
)

// The nflog reader, failed, opens its group again after a delay that
// doubles from markRetryMin to markRetryMax; one that ran longer than
// markRetryMax before it failed starts again from the floor.
const (
	markRetryMin = 100 * time.Millisecond
	markRetryMax = 10 * time.Second
)

// marksState is what the collector knows of its nflog reader (the
// source of the deciding rules' marks): the loop reads it to mark the
// flows decided without it (Flow.NoTrace), flush to report it.
type marksState struct {
	// markReader is the reader running (breakMarkReader closes it).
	markReader atomic.Pointer[flowlog.Reader]
	// markDown is set from a failure of the reader until it runs
	// again; markBack is when it last ran again (Unix ns, 0: never
	// failed): a connection that began before may have lost marks.
	markDown atomic.Bool
	markBack atomic.Int64
	// markFailures counts failures since the last batch.
	markFailures atomic.Uint64
}

// marksLost says whether a connection that began at first may lack
// marks because the nflog reader was down.
func (m *marksState) marksLost(first time.Time) bool {
	return m.markDown.Load() || first.UnixNano() < m.markBack.Load()
}

// readMarks runs the nflog reader nl, handing each packet to deliver,
// until ctx ends. A reader that fails is logged with the cause (once
// per failure, not per retry), counted (Batch.MarkReaderFailures),
// and opened again with backoff; meanwhile the flows decided are
// marked as having no trace. A nil nl is a reader Open could not open
// (logged and counted there): it is opened the same way.
func (c *Collector) readMarks(ctx context.Context, nl *flowlog.Reader, deliver func(flowlog.Packet)) {
	bo := backoff.New(markRetryMin, markRetryMax)
	for {
		if nl == nil {
			var err error
			for {
				if !bo.Wait(ctx) {
					return
				}
				if nl, err = flowlog.Open(c.cfg.NetnsFd, c.cfg.Group); err == nil {
					break
				}
				c.log.WithError(err).Debug("flowrec: opening the nflog group again failed")
			}
			c.markBack.Store(time.Now().UnixNano())
			c.markDown.Store(false)
			c.log.WithField("group", c.cfg.Group).Info("flowrec: the nflog reader of flow marks runs again")
		}
		c.markReader.Store(nl)
		began := time.Now()
		err := nl.Run(ctx, deliver, func() { c.nflogLost.Add(1) })
		nl.Close()
		nl = nil
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("flowrec: the nflog reader stopped")
		}
		c.markDown.Store(true)
		c.markFailures.Add(1)
		c.log.WithError(err).WithField("group", c.cfg.Group).Error(
			"flowrec: the nflog reader of flow marks failed: flows get no trace (noTrace) until it runs again")
		if time.Since(began) > markRetryMax {
			bo.Reset()
		}
	}
}

// breakMarkReader closes the running nflog reader's socket, as a
// failure would (tests).
func (c *Collector) breakMarkReader() error {
	nl := c.markReader.Load()
	if nl == nil {
		return fmt.Errorf("flowrec: no nflog reader runs")
	}
	return nl.Close()
}
