// Package supervise runs a daemon's parts side by side, errgroup-style:
// a part that fails is either restarted (with the shared backoff) or
// stops every other part, and Wait says which part stopped the daemon
// and why.
package supervise

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/backoff"
)

// Policy says what happens when a part returns an error.
type Policy int

const (
	// Fatal parts stop the daemon when they fail.
	Fatal Policy = iota
	// Restart parts are run again after a backoff (1 s doubling to 30 s,
	// back to 1 s after a run of a minute or more).
	Restart
)

// Group runs parts until its context ends or a Fatal part fails.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	log    *logrus.Entry
	wg     sync.WaitGroup

	once sync.Once
	err  error
}

// New returns a Group whose parts run under a context derived from ctx.
func New(ctx context.Context, log *logrus.Entry) *Group {
	gctx, cancel := context.WithCancel(ctx)
	return &Group{ctx: gctx, cancel: cancel, log: log}
}

// Go starts part name. A part returns nil only when its context ends.
func (g *Group) Go(name string, p Policy, run func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		retry := backoff.New(time.Second, 30*time.Second)
		for {
			start := time.Now()
			err := run(g.ctx)
			if g.ctx.Err() != nil {
				return
			}
			if err == nil {
				err = fmt.Errorf("stopped by itself")
			}
			if p == Fatal {
				g.fail(fmt.Errorf("%s: %w", name, err))
				return
			}
			if time.Since(start) > time.Minute {
				retry.Reset()
			}
			g.log.WithError(err).WithField("part", name).Error("part failed; restarting it")
			if !retry.Wait(g.ctx) {
				return
			}
		}
	}()
}

func (g *Group) fail(err error) {
	g.once.Do(func() {
		g.err = err
		g.log.WithError(err).Error("part failed; stopping")
		g.cancel()
	})
}

// Wait blocks until the context ends or a Fatal part fails, then cancels
// every part and waits for them up to grace. It returns the failure that
// stopped the daemon (nil when its context ended).
func (g *Group) Wait(grace time.Duration) error {
	<-g.ctx.Done()
	g.cancel()
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		g.log.Warn("parts did not stop in time")
	}
	g.once.Do(func() {}) // no failure can be recorded after this
	return g.err
}
