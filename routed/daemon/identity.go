package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/routed-net/routed/pkg/datastore"
)

// datastoreGuard keeps felix and the BGP speaker from following a
// datastore that was wiped, swapped for another cluster's, rolled back to
// an older backup, or marked not ready. Each node remembers the cluster's
// identity (datastore.ClusterInfo) and the highest revision it saw; while
// the datastore disagrees, every feed into felix and the speaker is held
// (frozen): what they programmed and advertise stays as it is, readiness
// says why, and the log says what to do. When the datastore is restored,
// or the operator re-initialises it (`routedctl datastore reinit`), the
// feeds restart from fresh snapshots.
type datastoreGuard struct {
	ds        *datastore.Client
	stateFile string

	mu       sync.Mutex
	guid     string
	maxRev   int64
	saved    time.Time
	frozen   bool
	reason   string
	restarts chan struct{} // closed when the feeds must resync
}

// identityState is what a node keeps on disk about its cluster.
type identityState struct {
	GUID   string `json:"clusterGUID"`
	MaxRev int64  `json:"maxRevision"`
}

func newDatastoreGuard(ds *datastore.Client, stateDir string) *datastoreGuard {
	return &datastoreGuard{ds: ds, stateFile: filepath.Join(stateDir, "cluster-identity"), restarts: make(chan struct{})}
}

// start loads what this node remembers and checks the datastore: a node
// that remembers nothing initialises an empty datastore's identity or
// learns the existing one. It returns datastore.ErrUnavailable (to
// retry) when etcd cannot be reached.
func (g *datastoreGuard) start(ctx context.Context) error {
	if b, err := os.ReadFile(g.stateFile); err == nil {
		var st identityState
		if err := json.Unmarshal(b, &st); err == nil {
			g.guid, g.maxRev = st.GUID, st.MaxRev
		}
	}
	if g.guid == "" {
		ci, err := g.ds.InitClusterInfo(ctx)
		if err != nil {
			return err
		}
		g.mu.Lock()
		g.guid = ci.GUID
		g.mu.Unlock()
		g.save(true)
		log.WithField("clusterGUID", ci.GUID).Info("cluster identity learnt")
	}
	_, err := g.verify(ctx, 0)
	if errors.Is(err, datastore.ErrUnavailable) {
		return err
	}
	return nil
}

// Frozen reports whether the feeds are held, and why.
func (g *datastoreGuard) Frozen() (bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.frozen, g.reason
}

// verify checks the datastore's identity now, and that its current
// revision (rev when non-zero, for tests) is not behind what this node
// saw, and freezes when either is wrong. It reports whether the feeds
// may go on.
func (g *datastoreGuard) verify(ctx context.Context, rev int64) (bool, error) {
	ci, err := g.ds.GetClusterInfo(ctx, 0)
	g.mu.Lock()
	defer g.mu.Unlock()
	if rev == 0 && ci != nil {
		rev = ci.Revision
	}
	var why string
	switch {
	case errors.Is(err, datastore.ErrNoClusterInfo):
		why = "the datastore has no cluster identity: etcd was wiped or replaced, or routed points at the wrong etcd. " +
			"Restore etcd from a backup (routed resumes by itself), or accept this datastore with `routedctl datastore reinit`"
	case err != nil:
		// Unreachable or unreadable: hold, and retry until it answers.
		why = "cannot read the cluster identity: " + err.Error()
	case ci.GUID != g.guid && ci.Adoptable(time.Now()):
		log.WithFields(map[string]any{"from": g.guid, "to": ci.GUID}).Warn("adopting the re-initialised datastore's identity")
		g.guid, g.maxRev = ci.GUID, rev
		g.saveLocked(true)
	case ci.GUID != g.guid:
		why = fmt.Sprintf("the datastore belongs to another cluster (identity %s, this node's cluster is %s): routed points at the wrong etcd, or it was replaced. "+
			"Point routed back at its etcd, or accept this one with `routedctl datastore reinit`", ci.GUID, g.guid)
		if !ci.AdoptUntil.IsZero() {
			why += fmt.Sprintf(" (it was re-initialised, but nodes could adopt it only until %s)", ci.AdoptUntil.UTC().Format(time.RFC3339))
		}
	case !ci.DatastoreReady:
		why = "the datastore is marked not ready (datastoreReady: false); `routedctl datastore set-ready true` when the work on it is done"
	case rev < g.maxRev:
		why = fmt.Sprintf("the datastore went back in time (revision %d, this node saw %d): it was restored from an older backup. "+
			"Restore the newest backup, or accept this one with `routedctl datastore reinit`", rev, g.maxRev)
	}
	if why != "" {
		if !g.frozen || g.reason != why {
			log.Error("holding the dataplane and BGP as they are: " + why)
		}
		g.frozen, g.reason = true, why
		return false, err
	}
	if rev > g.maxRev {
		g.maxRev = rev
		g.saveLocked(false)
	}
	if g.frozen {
		log.Warn("the datastore is trusted again: resyncing felix and BGP from it")
		g.frozen, g.reason = false, ""
		close(g.restarts)
		g.restarts = make(chan struct{})
	}
	return true, nil
}

// seen records a revision an event carried.
func (g *datastoreGuard) seen(rev int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if rev > g.maxRev {
		g.maxRev = rev
		g.saveLocked(false)
	}
}

func (g *datastoreGuard) save(force bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.saveLocked(force)
}

// saveLocked writes the state file, at most every 30 s unless forced.
func (g *datastoreGuard) saveLocked(force bool) {
	if !force && time.Since(g.saved) < 30*time.Second {
		return
	}
	b, _ := json.Marshal(identityState{GUID: g.guid, MaxRev: g.maxRev})
	if err := writeStateFile(filepath.Dir(g.stateFile), filepath.Base(g.stateFile), string(b)); err != nil {
		log.WithError(err).Warn("cannot save the cluster identity")
		return
	}
	g.saved = time.Now()
}

// watch re-checks a frozen datastore every few seconds until ctx ends.
func (g *datastoreGuard) watch(ctx context.Context) error {
	t := time.NewTicker(3 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			g.save(true)
			return nil
		case <-t.C:
		}
		if frozen, _ := g.Frozen(); frozen {
			_, _ = g.verify(ctx, 0)
		}
	}
}

// restartable runs f and restarts it (fresh snapshots) each time the
// guard unfreezes, until ctx ends.
func (g *datastoreGuard) restartable(f func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			g.mu.Lock()
			restart := g.restarts
			g.mu.Unlock()
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- f(fctx) }()
			select {
			case err := <-done:
				cancel()
				return err
			case <-restart:
				cancel()
				<-done
			}
		}
	}
}
