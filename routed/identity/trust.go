package identity

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Hook is work a held node does before it follows the datastore again
// (BeforeTrust). It calls doing with what it is doing, for readiness
// ("putting back 12 pods ..."); it returns nil when the node may follow
// the datastore.
type Hook func(ctx context.Context, doing func(string)) error

// How long a Hook may run, and how long after a failed one the next
// starts. The hook runs off the feed's goroutine: its bound no longer
// stalls the watch, it only keeps a wedged etcd request from holding
// the node for ever.
const (
	trustTimeout = 2 * time.Minute
	trustRetry   = 5 * time.Second
)

// reasonTrusting is the Guard's reason while the hook runs: Frozen says
// what it is doing instead (trust.reasonLocked).
const reasonTrusting = "putting back this node's pods before following the datastore again"

// reasonWaitingForRun: the datastore may be trusted again, but Run has
// not started (it asks for a new judgement when it does).
const reasonWaitingForRun = "the datastore can be trusted again; this node puts back its pods before following it once routed has started"

// trust runs a Guard's Hook. Invariants (all under Guard.mu): at most one
// hook goroutine exists (running); it starts only while Run's context is
// set, so Run can wait for it; a result counts only for the attempt that
// is current (attempt), so an attempt abandoned because the datastore
// went wrong again is never taken for a success.
type trust struct {
	hook    Hook
	rejudge func()
	retry   time.Duration
	timeout time.Duration

	ctx context.Context // Run's; nil before Run and once it ends
	wg  sync.WaitGroup  // the hook goroutine, joined by Run

	attempt uint64 // bumped by each start and by abandon
	running bool
	cancel  context.CancelFunc
	since   time.Time
	doing   string
	ok      bool      // the current attempt succeeded; Admit lets go
	failed  string    // why the last attempt failed ("" when it did not)
	lastTry time.Time // when it failed
	// failures in a row: the delay before the next attempt doubles with
	// each (an attempt lists every endpoint of the cluster), up to
	// maxTrustRetry.
	failures int
}

// maxTrustRetry caps the delay between failing attempts.
const maxTrustRetry = 2 * time.Minute

// delay is how long after a failure the next attempt waits.
func (t *trust) delay() time.Duration {
	return min(t.retry<<min(max(t.failures-1, 0), 8), max(maxTrustRetry, t.retry))
}

// BeforeTrust sets f to run each time the node is about to follow the
// datastore after holding it: a node puts back the pods it runs that the
// datastore lost (routed/reimport). f runs on its own goroutine under
// Run's context, the guard still frozen (so nothing else writes); Admit
// holds meanwhile and lets go at the first call after f succeeded.
// rejudge asks the feed to call Admit again (feed.Feed.Rejudge): it is
// called when f ends and when a failed f may be tried again, so the node
// lets go, or retries, without waiting for a datastore change. While f
// fails the node keeps holding, and says why. Call before the feed runs.
func (g *Guard) BeforeTrust(f Hook, rejudge func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trust.hook, g.trust.rejudge = f, rejudge
}

// Run lets the BeforeTrust hook run, under ctx, until ctx ends (the
// daemon's SIGTERM); then it cancels a running hook and waits for it.
// Before Run a node that may follow the datastore again keeps holding.
func (g *Guard) Run(ctx context.Context) error {
	g.mu.Lock()
	g.trust.ctx = ctx
	waited := g.frozen && g.reason == reasonWaitingForRun
	rejudge := g.trust.rejudge
	g.mu.Unlock()
	if waited && rejudge != nil {
		rejudge()
	}
	<-ctx.Done()
	g.mu.Lock()
	g.trust.ctx = nil // no hook starts from here on
	g.mu.Unlock()
	g.trust.wg.Wait()
	return nil
}

// trustLocked returns why a node the datastore may be trusted by must
// keep holding ("" when it may follow it), starting the hook when it is
// due.
func (g *Guard) trustLocked() string {
	t := &g.trust
	switch {
	case t.ok:
		t.ok = false
		return ""
	case t.running:
		// Also while an abandoned attempt is still ending: one at a
		// time; its end asks for a new judgement.
		return reasonTrusting
	case t.ctx == nil:
		return reasonWaitingForRun
	case t.failed != "" && time.Since(t.lastTry) < t.delay():
		return t.failed
	}
	g.startTrustLocked()
	return reasonTrusting
}

// startTrustLocked starts the hook on its own goroutine.
func (g *Guard) startTrustLocked() {
	t := &g.trust
	t.attempt++
	id, parent, hook := t.attempt, t.ctx, t.hook
	ctx, cancel := context.WithTimeout(parent, t.timeout)
	t.running, t.cancel, t.since = true, cancel, time.Now()
	t.doing = "putting back the pods it runs that the datastore lacks"
	log.Warn("the datastore can be trusted again: putting back this node's pods it lacks before following it")
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		err := hook(ctx, func(what string) { g.noteTrust(id, what) })
		cancel()
		g.endTrust(id, parent, err)
	}()
}

// noteTrust records what attempt id is doing.
func (g *Guard) noteTrust(id uint64, what string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.trust.attempt == id && g.trust.running {
		g.trust.doing = what
	}
}

// endTrust records how attempt id ended and asks the feed to judge
// again: at once after a success (it lets go), after retry after a
// failure (it tries again), at once after an abandoned attempt (one may
// be due now that it is gone).
func (g *Guard) endTrust(id uint64, parent context.Context, err error) {
	g.mu.Lock()
	t := &g.trust
	t.running, t.cancel = false, nil
	current := t.attempt == id
	switch {
	case !current:
	case parent.Err() != nil:
		t.failed, t.lastTry = "routed is stopping", time.Now()
	case err == nil:
		t.ok, t.failed, t.failures = true, "", 0
		if g.frozen {
			g.reason = "this node's pods are back in the datastore; it follows it again at the feed's next judgement"
		}
		log.WithField("took", time.Since(t.since).Round(time.Millisecond)).Info("this node's pods are in the datastore")
	default:
		t.failed = "the datastore lacks pods this node runs and they could not be put back (" + err.Error() +
			"); see `routedctl ipam reimport --dry-run` on this node. Holding so that their addresses are not given to new pods"
		t.lastTry = time.Now()
		t.failures++
		if g.frozen {
			g.reason = t.failed
		}
		log.Error("holding the dataplane and BGP as they are: " + t.failed)
	}
	rejudge, retry := t.rejudge, t.delay()
	g.mu.Unlock()
	if rejudge == nil || parent.Err() != nil {
		return
	}
	if current && err != nil {
		select {
		case <-time.After(retry):
		case <-parent.Done():
			return
		}
	}
	rejudge()
}

// abandonTrustLocked forgets a success not yet used and cancels a
// running hook: the datastore is wrong again, and nothing is written
// into a datastore the node does not trust.
func (g *Guard) abandonTrustLocked() {
	t := &g.trust
	t.ok = false
	if t.running && t.cancel != nil {
		log.Warn("the datastore is not trusted any more: stopping putting back this node's pods")
		t.attempt++
		t.cancel()
		t.cancel = nil
	}
}

// reasonLocked says what the running hook does, and for how long.
func (t *trust) reasonLocked(now time.Time) string {
	return fmt.Sprintf("the datastore can be trusted again; before following it this node is %s (for %s)",
		t.doing, now.Sub(t.since).Round(time.Second))
}
