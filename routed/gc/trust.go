package gc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/routed-net/routed/pkg/datastore"
)

// Trust is the datastore check of a cluster GC process that keeps no
// state of its own (`routed cluster-gc`), in place of the node's identity
// guard. Its pass writes nothing while the datastore has no cluster
// identity yet, is marked not ready (a migration, a restore), is another
// cluster's than the one it first read (outside the window `routedctl
// datastore reinit` opens), or went back in time (restored from an older
// backup: that holds until reinit, or a restart). Every replica judges
// all along (Run), not only the elected one, so a standby that takes
// over knows what it saw. A process started after a restore trusts what
// it then reads, as a node that remembers nothing does: the restore
// procedure scales routed-cluster-gc to 0 first (docs/etcd-restore.md).
type Trust struct {
	ctx     context.Context
	ds      *datastore.Client
	timeout time.Duration
	now     func() time.Time

	// check serialises Held's read with its judgement: two reads
	// judged in the other order than they were made would look like
	// the revision went back.
	check      sync.Mutex
	mu         sync.Mutex
	guid       string
	maxRev     int64
	rolledBack bool
	backTo     int64  // the revision read when it went back
	last       string // the last reason logged, to log each change once
	// judged is when the last judgement finished (Alive); until the
	// first, when the Trust was made.
	judged time.Time
}

// NewTrust returns a Trust reading the identity through ds; reads end
// with ctx.
func NewTrust(ctx context.Context, ds *datastore.Client) *Trust {
	return &Trust{ctx: ctx, ds: ds, timeout: 10 * time.Second, now: time.Now, judged: time.Now()}
}

// Alive reports an error when no judgement has finished for longer than
// within: the loop Run drives (one judgement a period, each read bounded
// by its timeout, whatever etcd does) is stuck. A held datastore, or
// one that cannot be read, is judged all the same and stays alive:
// restarting the process would not change what it reads.
func (t *Trust) Alive(within time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if since := t.now().Sub(t.judged); since > within {
		return fmt.Errorf("the datastore trust check last finished %s ago (more than %s): stuck", since.Round(time.Second), within)
	}
	return nil
}

// Run judges the datastore every period until ctx ends.
func (t *Trust) Run(ctx context.Context, period time.Duration) {
	for {
		t.Held()
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

// Held reads the cluster identity and reports whether the pass must
// not write now; each new reason is logged once.
func (t *Trust) Held() bool {
	t.check.Lock()
	defer t.check.Unlock()
	ctx, cancel := context.WithTimeout(t.ctx, t.timeout)
	defer cancel()
	ci, err := t.ds.GetClusterInfo(ctx, 0)
	t.mu.Lock()
	defer t.mu.Unlock()
	reason := t.judgeLocked(ci, err)
	t.judged = t.now()
	if reason != t.last {
		if reason != "" {
			log.Warn("cluster-wide GC held: " + reason)
		} else {
			log.Info("cluster-wide GC: the datastore is trusted")
		}
		t.last = reason
	}
	return reason != ""
}

// Reason is why the last check held, or "".
func (t *Trust) Reason() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last
}

func (t *Trust) judgeLocked(ci *datastore.ClusterInfo, err error) string {
	switch {
	case errors.Is(err, datastore.ErrNoClusterInfo):
		return "the datastore has no cluster identity yet (the first routed node writes it)"
	case err != nil:
		return fmt.Sprintf("cannot read the cluster identity: %v", err)
	case !ci.DatastoreReady:
		return "the datastore is marked not ready (datastoreReady false: a migration or a restore is under way)"
	}
	if t.guid != "" && ci.GUID != t.guid {
		if !ci.Adoptable(t.now()) {
			return fmt.Sprintf("the datastore is another cluster's (identity %s, this process followed %s): point it at the right one, or run routedctl datastore reinit to accept this one", ci.GUID, t.guid)
		}
		log.WithField("was", t.guid).WithField("now", ci.GUID).Warn("cluster-wide GC adopts the cluster identity routedctl datastore reinit wrote")
		t.guid, t.maxRev, t.rolledBack = ci.GUID, ci.Revision, false
		return ""
	}
	if !t.rolledBack && ci.Revision < t.maxRev {
		t.rolledBack, t.backTo = true, ci.Revision
	}
	if t.rolledBack {
		return fmt.Sprintf("the datastore went back in time (revision %d, after %d was seen): restored from an older backup? routedctl datastore reinit (once the nodes' endpoints are re-imported) lets GC go on", t.backTo, t.maxRev)
	}
	t.guid, t.maxRev = ci.GUID, ci.Revision
	return ""
}
