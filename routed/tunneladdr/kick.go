package tunneladdr

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/routed-net/routed/internal/backoff"
	"github.com/routed-net/routed/pkg/api"
	"github.com/routed-net/routed/pkg/datastore"
	"github.com/routed-net/routed/pkg/feed"
)

var log = logrus.WithField("component", "tunneladdr")

// writeRetries bounds EnsureTunnelAddress's read-modify-write loop when
// it loses to other writers.
const writeRetries = 10

// Kinds are what decides the tunnel addresses: any pool, this Node.
var Kinds = []api.Kind{api.KindIPPool, api.KindNode}

// recheck is how often the Loop confirms with IPAM that the tunnel
// handles still hold what the Node records (IPAM is not in its feed).
const recheck = 10 * time.Minute

// heldPoll is how often a held Loop looks whether it may write again.
const heldPoll = 3 * time.Second

// Loop keeps this node's tunnel addresses in line with the pools. It
// keeps the pools and this Node as the node feed delivers them and
// settles the addresses from them whenever either changes: no etcd read
// on a wake. Failures are retried with backoff.
type Loop struct {
	st   Store
	ic   IPAM
	node string
	held func() bool // true: write nothing (the datastore is not trusted)
	kick chan struct{}

	// Written by OnBatch (and by Run after its own write of the Node);
	// Run takes a copy under mu.
	mu     sync.Mutex
	synced bool // a snapshot arrived
	me     *api.Node
	pools  map[string]*api.IPPool
	rev    int64 // revision of the last batch taken

	// passed is the feed revision the last completed pass decided from.
	passed atomic.Int64
}

// New returns the Loop of node; held reports when to write nothing.
func New(st Store, ic IPAM, node string, held func() bool) *Loop {
	return &Loop{st: st, ic: ic, node: node, held: held, kick: make(chan struct{}, 1), pools: map[string]*api.IPPool{}}
}

func (l *Loop) wake() {
	select {
	case l.kick <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// OnBatch implements feed.Consumer: it keeps the pools and this Node and
// wakes Run when either changed. The feed hands each consumer its own
// decoded copies, so they are kept as given and never changed.
func (l *Loop) OnBatch(b feed.Batch) {
	l.mu.Lock()
	changed := b.Snapshot
	if b.Snapshot {
		l.synced, l.me, l.pools = true, nil, map[string]*api.IPPool{}
	}
	for _, u := range b.Updates {
		switch {
		case u.Kind == api.KindIPPool:
			changed = true
			if p, ok := u.Resource.(*api.IPPool); ok && !u.Deleted {
				l.pools[u.Name] = p
			} else {
				delete(l.pools, u.Name)
			}
		case u.Kind == api.KindNode && u.Name == l.node:
			changed = true
			if n, ok := u.Resource.(*api.Node); ok && !u.Deleted {
				l.keepNode(n, b.Snapshot)
			} else {
				l.me = nil
			}
		}
	}
	l.rev = max(l.rev, b.Revision)
	if b.Snapshot {
		l.rev = b.Revision // a snapshot replaces all, also a datastore gone back in time
	}
	l.mu.Unlock()
	if changed {
		l.wake()
	}
}

// keepNode takes n as this Node unless the one kept is newer (the Loop's
// own write, ahead of the feed). A snapshot replaces it regardless. Must
// hold mu.
func (l *Loop) keepNode(n *api.Node, snapshot bool) {
	if snapshot || l.me == nil || revOf(n) >= revOf(l.me) {
		l.me = n
	}
}

func revOf(n *api.Node) int64 {
	r, _ := strconv.ParseInt(n.Metadata.ResourceVersion, 10, 64)
	return r
}

// view is what one pass decides from.
type view struct {
	node  *api.Node // nil: the feed has not delivered it (yet)
	pools []*api.IPPool
	rev   int64
}

// view copies the state the feed delivered; ok is false before the
// first snapshot.
func (l *Loop) view() (v view, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v = view{node: l.me, rev: l.rev, pools: make([]*api.IPPool, 0, len(l.pools))}
	for _, p := range l.pools {
		v.pools = append(v.pools, p)
	}
	slices.SortFunc(v.pools, func(a, b *api.IPPool) int { return strings.Compare(a.Metadata.Name, b.Metadata.Name) })
	return v, l.synced
}

// Run keeps the addresses until ctx ends. Its first pass, a retry after
// an error and the periodic re-check confirm the addresses with IPAM;
// every other pass touches etcd only for a change.
func (l *Loop) Run(ctx context.Context) error {
	retry := backoff.New(time.Second, 30*time.Second)
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	verify := true
	for {
		var again <-chan time.Time
		switch err := l.pass(ctx, verify); {
		case err == nil:
			retry.Reset()
			verify = false
		case errors.Is(err, errWaiting), ctx.Err() != nil:
		case errors.Is(err, errHeld):
			again = time.After(heldPoll)
		default:
			log.WithError(err).Warn("tunnel address not settled; will retry")
			again = time.After(retry.Next())
			verify = true // after an error, trust nothing remembered
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
		case <-again:
		case <-tick.C:
			verify = true
		}
	}
}

var (
	// errHeld: the datastore is not trusted, so nothing is written.
	errHeld = errors.New("tunneladdr: datastore held")
	// errWaiting: the feed has still to bring what a pass needs (its
	// first snapshot, this Node, its address, or the newer Node a write
	// lost to); the feed wakes the Loop when it does.
	errWaiting = errors.New("tunneladdr: waiting for the feed")
)

// pass settles the addresses once from the feed's view.
func (l *Loop) pass(ctx context.Context, verify bool) error {
	v, ok := l.view()
	if !ok {
		return errWaiting
	}
	if l.held() {
		return errHeld
	}
	if v.node == nil {
		l.passed.Store(v.rev)
		return fmt.Errorf("%w: no Node %q", errWaiting, l.node)
	}
	written, err := settle(ctx, l.st, l.ic, v.node, v.pools, verify)
	switch {
	case errors.Is(err, ErrNoNodeAddress), errors.Is(err, datastore.ErrConflict), errors.Is(err, datastore.ErrNotFound):
		l.passed.Store(v.rev)
		log.WithError(err).Debug("waiting for the feed to bring this node's Node")
		return fmt.Errorf("%w: %w", errWaiting, err)
	case err != nil:
		return err
	case written != nil:
		l.mu.Lock()
		if l.me != nil && revOf(written) > revOf(l.me) {
			l.me = written
		}
		l.mu.Unlock()
	}
	l.passed.Store(v.rev)
	return nil
}
