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
// guard: its pass writes nothing while the datastore has no cluster
// identity yet or is marked not ready (a migration, a restore), and
// nothing more, until it is restarted, once the datastore is another
// cluster's than the one it first read (outside the window `routedctl
// datastore reinit` opens) or went back in time (restored from an older
// backup). A restarted process trusts what it then reads, as a node
// that remembers nothing does; the nodes' own guards still hold them.
type Trust struct {
	ds      *datastore.Client
	timeout time.Duration
	now     func() time.Time

	mu     sync.Mutex
	guid   string
	maxRev int64
	stuck  string // why it holds until a restart
	last   string // the last reason logged, to log each change once
}

// NewTrust returns a Trust reading the identity through ds.
func NewTrust(ds *datastore.Client) *Trust {
	return &Trust{ds: ds, timeout: 10 * time.Second, now: time.Now}
}

// Held reads the cluster identity and reports whether the pass must
// not write now; each new reason is logged once.
func (t *Trust) Held() bool {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	ci, err := t.ds.GetClusterInfo(ctx, 0)
	t.mu.Lock()
	defer t.mu.Unlock()
	reason := t.judgeLocked(ci, err)
	if reason != t.last {
		if reason != "" {
			log.Warn("cluster-wide GC held: " + reason)
		} else {
			log.Info("cluster-wide GC: the datastore is trusted again")
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
	if t.stuck != "" {
		return t.stuck
	}
	switch {
	case errors.Is(err, datastore.ErrNoClusterInfo):
		return "the datastore has no cluster identity yet (the first routed node writes it)"
	case err != nil:
		return fmt.Sprintf("cannot read the cluster identity: %v", err)
	case !ci.DatastoreReady:
		return "the datastore is marked not ready (datastoreReady false: a migration or a restore is under way)"
	}
	if ci.Revision < t.maxRev {
		t.stuck = fmt.Sprintf("the datastore went back in time (revision %d, after %d was seen): restored from an older backup? Restart routed cluster-gc once the datastore is the one to follow", ci.Revision, t.maxRev)
		return t.stuck
	}
	t.maxRev = ci.Revision
	switch {
	case t.guid == "" || ci.GUID == t.guid:
	case ci.Adoptable(t.now()):
		log.WithField("was", t.guid).WithField("now", ci.GUID).Warn("cluster-wide GC adopts the cluster identity routedctl datastore reinit wrote")
	default:
		t.stuck = fmt.Sprintf("the datastore is another cluster's now (identity %s, first read %s): restart routed cluster-gc once it points at the right one", ci.GUID, t.guid)
		return t.stuck
	}
	t.guid = ci.GUID
	return ""
}
